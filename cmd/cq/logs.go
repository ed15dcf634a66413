package main

import (
	"errors"
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
	var runN int
	var stderr, follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the output of a task's latest run (--run N, --stderr, --follow)",
		Args:  exactArgs(1, "logs takes one task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("run") && runN < 1 {
				return usageErr("--run: want an attempt number, 1 or more")
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
			runs := *t.Runs
			if len(runs) == 0 {
				return &queue.Error{Code: queue.CodeNotFound, Msg: "task " + t.ID + " has no run yet"}
			}
			r := runs[len(runs)-1]
			if cmd.Flags().Changed("run") {
				if runN > len(runs) {
					return &queue.Error{Code: queue.CodeNotFound, Msg: "task " + t.ID + " has no run " + itoa(runN)}
				}
				r = runs[runN-1]
			}
			home, _ := app.Home()
			name := "stdout.log"
			if stderr {
				name = "stderr.log"
			}
			path := filepath.Join(home, "runs", r.ID, name)
			var off int64
			for {
				// Read the state before the file, so the last bytes written
				// before the run ended are always printed.
				state, err := st.RunState(ctx, r.ID)
				if err != nil {
					return err
				}
				n, err := copyFrom(app.Stdout, path, off)
				if errors.Is(err, os.ErrNotExist) {
					// Nothing written yet, or a run that never started
					// (its spawn failed, it timed out queued): no output.
					// A started run had its folder made before its
					// process: one gone since was deleted, and printing
					// nothing would pass for empty output.
					if r.StartedAt != nil && !exists(filepath.Dir(path)) {
						return &queue.Error{Code: queue.CodeNotFound, Msg: "the output of run " + r.ID + " is gone: no folder " + filepath.Dir(path)}
					}
					err = nil
				}
				if err != nil {
					return err
				}
				off += n
				if !follow || queue.RunTerminal(state) {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(waitPoll):
				}
				if outputGone(app.Stdout) {
					return errOutputGone
				}
			}
		},
	}
	cmd.Flags().IntVar(&runN, "run", 0, "the run with this attempt number (default the latest)")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing until the run ends")
	return cmd
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
