package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newLogsCmd(app *App) *cobra.Command {
	var runN, tail int
	var stderr, follow, both bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the output of a task's latest run (--run N, --stderr, --both, --tail N, --follow)",
		Long: `--follow (-f) prints the output as it is written until the run ends; on a
task with no run yet (or no run N) it first waits for that run.

--both prints stdout and stderr together, whole lines only. The files
keep no time of writing: what was already written when cq logs reads it
prints stdout's lines first, then stderr's. With --follow, lines print in
the order cq logs finds them, looking every tenth of a second: lines
written further apart than that keep their order across the two streams.

--tail N prints only the last N lines (of each stream with --both), then
follows with --follow.

Exit codes: 0 printed (with --follow: the run ended, or cq logs was
interrupted); 1 bad usage or an error; 4 no such task, no run yet (no run
N), or the run's output deleted; with --follow, 4 only when the task ended
without that run.`,
		Args: exactArgs(1, "logs takes one task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("run") && runN < 1 {
				return usageErr("--run: want an attempt number, 1 or more")
			}
			if stderr && both {
				return usageErr("give --stderr or --both, not both")
			}
			if !cmd.Flags().Changed("tail") {
				tail = -1
			} else if tail < 0 {
				return usageErr("--tail: want a number of lines, 0 or more")
			}
			ctx := cmd.Context()
			st, err := app.ReadStore(ctx)
			if err != nil {
				return err
			}
			t, err := findAfterDrain(ctx, app, func() (*queue.Task, error) { return st.Get(ctx, args[0]) })
			if err != nil {
				return err
			}
			home, _ := app.Home()
			o := logsOpts{run: runN, stderr: stderr, both: both, follow: follow, tail: tail}
			return printLogs(ctx, st, home, t, o, logsOut{
				w: app.Stdout,
				note: func(msg string) {
					fmt.Fprintln(app.Stderr, "cq: "+msg)
				},
				gone: func() bool { return outputGone(app.Stdout) },
			})
		},
	}
	cmd.Flags().IntVar(&runN, "run", 0, "the run with this attempt number (default the latest)")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	cmd.Flags().BoolVar(&both, "both", false, "print stdout and stderr together, line by line")
	cmd.Flags().IntVar(&tail, "tail", 0, "print only the last N lines (of each stream with --both)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the run ends (wait for the run if it has not started)")
	return cmd
}

// logsOpts are what cq logs prints (GET /tasks/{id}/logs too).
type logsOpts struct {
	run                  int // the attempt number; 0: the latest run
	stderr, both, follow bool
	tail                 int // the last lines to print; -1: all
}

// logsOut is where printLogs prints.
type logsOut struct {
	w io.Writer
	// note tells of output cut (a run of another host): cq logs says it
	// on stderr.
	note func(msg string)
	// gone reports that w's reader has gone, ending a follow with
	// errOutputGone; nil: never.
	gone func() bool
	// flush, when set, is called after each look of a follow at the
	// output, and once it is printed.
	flush func() error
}

func (o logsOut) isGone() bool { return o.gone != nil && o.gone() }

func (o logsOut) flushed() error {
	if o.flush == nil {
		return nil
	}
	return o.flush()
}

// printLogs prints the output of task t's run that o names, as cq logs
// does (GET /tasks/{id}/logs too): the run's files in home's runs folder,
// or, for a run of another host, the end of its output kept in the store.
// With o.follow it first waits for the run, then prints until the run
// ends; ctx done ends it with nil.
func printLogs(ctx context.Context, st *queue.Store, home string, t *queue.Task, o logsOpts, out logsOut) error {
	// With --follow, wait for the run to exist; without, or once the task
	// has ended (no run comes after), it is not found.
	var r queue.Run
	for {
		runs := *t.Runs
		n := len(runs)
		if o.run > 0 {
			n = o.run
		}
		if n >= 1 && n <= len(runs) {
			r = runs[n-1]
			break
		}
		missing := "no run yet"
		if o.run > 0 {
			missing = "no run " + itoa(o.run)
		}
		if o.follow && queue.TaskTerminal(t.State) {
			return &queue.Error{Kind: queue.NotFound, Msg: "task " + t.ID + " ended " + t.State + " with " + missing}
		}
		if !o.follow {
			return &queue.Error{Kind: queue.NotFound, Msg: "task " + t.ID + " has " + missing}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(waitPoll):
		}
		if out.isGone() {
			return errOutputGone
		}
		var err error
		if t, err = st.Get(ctx, t.ID); err != nil {
			return err
		}
	}
	dir := filepath.Join(home, "runs", r.ID)
	if !exists(dir) {
		// Not this host's run, maybe: its end kept in the store.
		done, err := printKept(ctx, st, r.ID, o, out)
		if done || err != nil {
			return err
		}
	}
	var files []*logFile
	switch {
	case o.both:
		files = []*logFile{{path: filepath.Join(dir, "stdout.log")}, {path: filepath.Join(dir, "stderr.log")}}
	case o.stderr:
		files = []*logFile{{path: filepath.Join(dir, "stderr.log")}}
	default:
		files = []*logFile{{path: filepath.Join(dir, "stdout.log")}}
	}
	for {
		// Read the state before the files, so the last bytes written
		// before the run ended are always printed.
		state, err := st.RunState(ctx, r.ID)
		if err != nil {
			return err
		}
		last := !o.follow || queue.RunTerminal(state)
		for _, f := range files {
			err := f.print(out.w, o.tail, o.both, last)
			if errors.Is(err, os.ErrNotExist) {
				// Nothing written yet, or a run that never started (its
				// spawn failed, it timed out queued): no output. A
				// started run had its folder made before its process:
				// one gone since was deleted, and printing nothing would
				// pass for empty output.
				if r.StartedAt != nil && !exists(dir) {
					return &queue.Error{Kind: queue.NotFound, Msg: "the output of run " + r.ID + " is gone: no folder " + dir}
				}
				err = nil
			}
			if err != nil {
				return err
			}
		}
		if err := out.flushed(); err != nil {
			return err
		}
		if last {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(waitPoll):
		}
		if out.isGone() {
			return errOutputGone
		}
	}
}

// logFile is one output file of a run being printed.
type logFile struct {
	path   string
	off    int64 // the next byte to print
	tailed bool  // the start --tail asks for has been found
	// partial is the start of a line not ended yet (--both prints whole
	// lines only, so that the two streams' lines do not mix).
	partial []byte
}

// maxPartial bounds a line held back by --both: a longer one is printed
// as it is.
const maxPartial = 64 << 10

// print prints what was written to the file since the last call, from
// the last tail lines on the first (tail < 0: all). In lines mode it
// prints only whole lines, unless last: then a line without its newline
// is printed too, ended with one.
func (f *logFile) print(w io.Writer, tail int, lines, last bool) error {
	if tail >= 0 && !f.tailed {
		off, err := tailOffset(f.path, tail)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		// A file not made yet holds nothing to skip.
		f.off, f.tailed = off, true
	}
	if !lines {
		n, err := copyFrom(w, f.path, f.off)
		f.off += n
		return err
	}
	fh, err := fsutil.OpenExisting(f.path, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer fh.Close()
	if _, err := fh.Seek(f.off, io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		k, rerr := fh.Read(buf)
		f.off += int64(k)
		b := buf[:k]
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			if _, err := w.Write(append(f.partial, b[:i+1]...)); err != nil {
				return err
			}
			f.partial = append(f.partial[:0], b[i+1:]...)
		} else {
			f.partial = append(f.partial, b...)
		}
		if len(f.partial) >= maxPartial {
			if _, err := w.Write(f.partial); err != nil {
				return err
			}
			f.partial = f.partial[:0]
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if last && len(f.partial) > 0 {
		if _, err := w.Write(append(f.partial, '\n')); err != nil {
			return err
		}
		f.partial = f.partial[:0]
	}
	return nil
}

// tailOffset is where the last n lines of path begin (a last line with
// no newline counts as a line).
func tailOffset(path string, n int) (int64, error) {
	f, err := fsutil.OpenExisting(path, os.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if n == 0 {
		return size, nil
	}
	buf := make([]byte, 64<<10)
	for pos := size; pos > 0; {
		k := min(int64(len(buf)), pos)
		pos -= k
		if _, err := f.ReadAt(buf[:k], pos); err != nil {
			return 0, err
		}
		for i := k - 1; i >= 0; i-- {
			// The newline that ends the file ends the last line; it
			// starts none.
			if buf[i] == '\n' && pos+i != size-1 {
				if n--; n == 0 {
					return pos + i + 1, nil
				}
			}
		}
	}
	return 0, nil
}

// copyFrom copies path from offset off to w. A log that is not a
// regular file is refused: a FIFO there would block the read for good.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	f, err := fsutil.OpenExisting(path, os.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.Copy(w, f)
}

func itoa(n int) string { return strconv.Itoa(n) }

// exists reports whether path exists (an error other than not-existing
// counts as existing: the caller then reads it and reports that).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// printKept prints the end of run id's output that the store keeps (a
// run of another host, where hosts share the store), as cq logs prints
// the files: stdout, stderr, or both (stdout's lines, then stderr's), the
// last o.tail lines of each (o.tail < 0: all). With o.follow it waits for
// the run to end first. It reports false, having printed nothing, when
// the store keeps none (the run is this host's, or did not end on a
// worker that keeps output).
func printKept(ctx context.Context, st *queue.Store, id string, o logsOpts, out logsOut) (bool, error) {
	for {
		k, err := st.RunOutput(ctx, id)
		if err != nil {
			return false, err
		}
		if k != nil {
			type stream struct {
				data []byte
				size int64
				name string
			}
			var ss []stream
			switch {
			case o.both:
				ss = []stream{{k.Stdout, k.StdoutSize, "stdout"}, {k.Stderr, k.StderrSize, "stderr"}}
			case o.stderr:
				ss = []stream{{k.Stderr, k.StderrSize, "stderr"}}
			default:
				ss = []stream{{k.Stdout, k.StdoutSize, "stdout"}}
			}
			for _, s := range ss {
				data := s.data
				cut := int64(len(data)) < s.size
				if cut {
					// The first line kept is likely a part of one.
					if i := bytes.IndexByte(data, '\n'); i >= 0 {
						data = data[i+1:]
					}
				}
				if o.tail >= 0 {
					data = lastLines(data, o.tail)
				}
				if _, err := out.w.Write(data); err != nil {
					return true, err
				}
				if cut {
					out.note(fmt.Sprintf("run %s's %s is cut to its last %d bytes here; the whole of it (%d bytes) is on host %s, in its home's runs/%s",
						id, s.name, len(data), s.size, k.Host, id))
				}
			}
			return true, out.flushed()
		}
		state, err := st.RunState(ctx, id)
		if err != nil || !o.follow || queue.RunTerminal(state) {
			return false, err
		}
		select {
		case <-ctx.Done():
			return true, nil
		case <-time.After(waitPoll):
		}
		if out.isGone() {
			return true, errOutputGone
		}
	}
}

// lastLines is the last n lines of b.
func lastLines(b []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
