package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// waitPoll is how often cq wait and cq logs --follow look again.
const waitPoll = 100 * time.Millisecond

func newWaitCmd(app *App) *cobra.Command {
	var timeout, queueName string
	var all, active bool
	cmd := &cobra.Command{
		Use:   "wait ID… | wait --queue Q | wait --all | wait --active [--queue Q]",
		Short: "Block until every task is done, failed or cancelled",
		Long: `--queue Q or --all instead of ids: every task of that queue (or of the
store) not yet done, failed or cancelled when cq wait starts; none is no
error (exit 0 at once). With stderr on a terminal, one line rewritten in
place counts the tasks done, failed, running and waiting.

--active (with --queue Q: of that queue) waits only for the runs live
(queued, running or cancelling) when cq wait starts, whatever their end,
never for a run that starts later, a retry of the same task included: a
deploy script's drain. None is no error (exit 0 at once).

Exit codes: 0 all done (--active: all ended); 1 any ended failed or
cancelled (named on stderr); 124 the --timeout came first (the tasks not
yet ended, or with --active the runs still live, named on stderr); 4 an
unknown id (at once); 130 (143) interrupted by SIGINT (SIGTERM).`,
		Args: func(cmd *cobra.Command, args []string) error {
			byQueue := cmd.Flags().Changed("queue")
			switch {
			case active && all:
				return usageErr("give --active or --all, not both")
			case active && len(args) > 0:
				return usageErr("give task ids or --active, not both")
			case active && byQueue && queueName == "":
				return usageErr("--queue is empty (name a queue, or leave it out for every queue)")
			case active:
				return nil
			case byQueue && all:
				return usageErr("give --queue or --all, not both")
			case (byQueue || all) && len(args) > 0:
				return usageErr("give task ids or --queue/--all, not both")
			case byQueue && queueName == "":
				return usageErr("--queue is empty (name a queue, or use --all)")
			case !byQueue && !all:
				return minArgs(1, "wait needs at least one task id")(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			deadline, err := timeoutFlag(cmd, timeout)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := app.ReadStore(ctx)
			if err != nil {
				return err
			}
			if active {
				return app.waitActive(ctx, st, queueName, deadline)
			}
			var ids []string
			if len(args) > 0 {
				// Every id is looked up and every bad one reported
				// (docs/commands.md, cq wait); then, if any was bad, the first one's code.
				ids = make([]string, 0, len(args))
				if err := multi(app.Stderr, args, func(ref string) error {
					id, err := findAfterDrain(ctx, app, func() (string, error) { return st.Resolve(ctx, ref) })
					ids = append(ids, id)
					return err
				}); err != nil {
					return err
				}
			} else {
				// The set is fixed now: a task created later is not waited
				// for, so a steady producer cannot make the wait endless.
				f := queue.ListFilter{States: unfinishedStates, Queue: queueName}
				if err := st.ListIDEach(ctx, f, func(id string) error {
					ids = append(ids, id)
					return nil
				}); err != nil {
					return err
				}
				if len(ids) == 0 {
					return nil
				}
			}
			var line *waitLine
			if app.stderrIsTerminal() {
				line = &waitLine{w: app.Stderr, start: time.Now()}
			}
			tick := time.NewTicker(waitPoll)
			defer tick.Stop()
			w := waiter{states: func(ids []string) (map[string]queue.TaskStatus, error) { return st.TaskStatuses(ctx, ids) }}
			// While no one commits to the store, nothing is read again.
			changed, stopWatch, err := st.Backend().ChangeWatch(ctx)
			if err != nil {
				return err
			}
			defer stopWatch()
			// The counts are taken only after a look, and only for the
			// line: a wait on a whole store may hold a million ids.
			var counts waitTally
			var waited map[string]bool // ids as a set, made when first needed
			look := func() (int, []string, error) {
				pending, bad, err := w.look(ids)
				if line != nil && err == nil {
					counts = w.tally(ids)
					if counts.running > 0 {
						if waited == nil {
							waited = make(map[string]bool, len(ids))
							for _, id := range ids {
								waited[id] = true
							}
						}
						counts.progress, err = runningProgress(ctx, st, waited)
					}
				}
				return pending, bad, err
			}
			// end reports how the wait ends once no task is pending.
			end := func(bad []string) error {
				line.finish(counts)
				for _, b := range bad {
					fmt.Fprintln(app.Stderr, "cq: "+oneLine(b))
				}
				if len(bad) > 0 {
					return silentExit(exitError)
				}
				return nil
			}
			for {
				if ch, err := changed(); err != nil || ch {
					pending, bad, err := look()
					if err != nil && ctx.Err() != nil {
						line.finish(counts)
						return silentExit(exitInterrupted)
					}
					if err != nil {
						line.finish(counts)
						return err
					}
					if pending == 0 {
						return end(bad)
					}
				}
				line.draw(counts)
				select {
				case <-ctx.Done():
					line.finish(counts)
					return silentExit(exitInterrupted)
				case <-deadline:
					// One last look, so the tasks named are those still
					// not ended at the deadline, not at the last change.
					pending, bad, err := look()
					if err != nil {
						line.finish(counts)
						return err
					}
					if pending == 0 {
						return end(bad)
					}
					line.finish(counts)
					w.namePending(app.Stderr, ids)
					return silentExit(exitTimeout)
				case <-tick.C:
				}
			}
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "give up after this long (exit 124)")
	cmd.Flags().StringVar(&queueName, "queue", "", "wait for every task of this queue not yet ended (with --active: its live runs)")
	cmd.Flags().BoolVar(&all, "all", false, "wait for every task in the store not yet ended")
	cmd.Flags().BoolVar(&active, "active", false, "wait only for the runs live now (of --queue Q), whatever their end")
	return cmd
}

// unfinishedStates are the task states cq wait --queue and --all wait on.
var unfinishedStates = []string{queue.TaskInbox, queue.TaskTodo, queue.TaskBlocked, queue.TaskDoing}

// maxNamed bounds the tasks a timed-out cq wait names one per line: a
// wait on a whole queue may leave thousands.
const maxNamed = 20

// namePending writes one line per task not yet ended, as last seen.
func (w *waiter) namePending(out io.Writer, ids []string) {
	left := w.unfinished(ids)
	for i, id := range left {
		if i == maxNamed {
			fmt.Fprintf(out, "cq: timed out; %d more tasks not ended\n", len(left)-maxNamed)
			break
		}
		fmt.Fprintf(out, "cq: timed out; task %s is still %s\n", id, w.seen[id].State)
	}
}

// waitTally counts the tasks of one cq wait by how they stand.
type waitTally struct {
	total, done, failed, cancelled, running, waiting int
	// progress is what the running tasks reported (cq progress), "" for
	// nothing.
	progress string
}

// runningProgress sums up the latest progress of the running tasks among
// waited: one task's as it reported it, several's as their done and total
// added up (when every one gave both) or how many reported.
func runningProgress(ctx context.Context, st *queue.Store, waited map[string]bool) (string, error) {
	all, err := st.LiveProgress(ctx)
	if err != nil {
		return "", err
	}
	var ps []*queue.Progress
	for id, p := range all {
		if waited[id] {
			ps = append(ps, p)
		}
	}
	switch len(ps) {
	case 0:
		return "", nil
	case 1:
		return progressText(ps[0]), nil
	}
	var done, total int64
	for _, p := range ps {
		if p.Done == nil || p.Total == nil {
			return fmt.Sprintf("%d reporting", len(ps)), nil
		}
		done, total = done+*p.Done, total+*p.Total
	}
	return progressText(&queue.Progress{Done: &done, Total: &total}), nil
}

// tally counts ids as last seen; a task deleted before it was seen ended
// counts as failed, since it fails the wait.
func (w *waiter) tally(ids []string) waitTally {
	var c waitTally
	counted := make(map[string]bool, len(ids))
	for _, id := range ids {
		if counted[id] {
			continue
		}
		counted[id] = true
		c.total++
		if w.lost[id] {
			c.failed++
			continue
		}
		switch w.seen[id].State {
		case queue.TaskDone:
			c.done++
		case queue.TaskFailed:
			c.failed++
		case queue.TaskCancelled:
			c.cancelled++
		case queue.TaskDoing:
			c.running++
		default:
			c.waiting++
		}
	}
	return c
}

// waitLine is cq wait's live line on a terminal: rewritten in place as
// the counts or the elapsed time change, ended with a newline. A nil
// waitLine (stderr is no terminal) draws nothing.
type waitLine struct {
	w     io.Writer
	start time.Time
	last  string
}

// text renders c and the elapsed time, e.g.
// "12/40 done · 1 failed · 3 running · 24 waiting · 0:42".
func (c waitTally) text(elapsed time.Duration) string {
	s := fmt.Sprintf("%d/%d done · %d failed", c.done, c.total, c.failed)
	if c.cancelled > 0 {
		s += fmt.Sprintf(" · %d cancelled", c.cancelled)
	}
	s += fmt.Sprintf(" · %d running · %d waiting · %s", c.running, c.waiting, clockText(elapsed))
	if c.progress != "" {
		s += " · " + c.progress
	}
	return s
}

// clockText is d as m:ss, or h:mm:ss from an hour.
func clockText(d time.Duration) string {
	secs := int(d / time.Second)
	if secs >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", secs/3600, secs/60%60, secs%60)
	}
	return fmt.Sprintf("%d:%02d", secs/60, secs%60)
}

// lineText is what a waitLine shows: counts, rendered with the time
// elapsed.
type lineText interface {
	text(elapsed time.Duration) string
}

func (l *waitLine) draw(c lineText) {
	if l == nil {
		return
	}
	s := c.text(time.Since(l.start))
	if width := stderrWidth(l.w); width > 1 {
		// A line longer than the terminal wraps, and \r would then
		// rewrite only its last row. The last column stays free: some
		// terminals wrap once it is written.
		if r := []rune(s); len(r) > width-1 {
			s = string(r[:width-2]) + "…"
		}
	}
	if s == l.last {
		return
	}
	l.last = s
	// \r back to the start, the text, then erase what a longer earlier
	// text left to the right.
	fmt.Fprint(l.w, "\r"+s+"\x1b[K")
}

// finish draws the final counts and ends the line, so that what follows
// (errors, the shell's prompt) starts on a line of its own.
func (l *waitLine) finish(c lineText) {
	if l == nil {
		return
	}
	l.draw(c)
	fmt.Fprintln(l.w)
}

// stderrWidth is the width of the terminal w is, or 0.
func stderrWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}

// timeoutFlag reads cmd's --timeout flag: nil (no deadline) when it is
// left out, else a channel that fires once it has passed. Given empty
// (a script's unset variable) it is bad usage, as for cq enqueue, not a
// wait without end.
func timeoutFlag(cmd *cobra.Command, timeout string) (<-chan time.Time, error) {
	if !cmd.Flags().Changed("timeout") {
		return nil, nil
	}
	if timeout == "" {
		return nil, usageErr("--timeout is empty (leave it out to wait without a deadline)")
	}
	d, err := queue.ParseDuration(timeout)
	if err != nil {
		return nil, usageErr("--timeout: %v", err)
	}
	if d < 0 {
		return nil, usageErr("--timeout must not be negative")
	}
	return time.After(d), nil
}

// waiter is one cq wait's view of its tasks. Each look reads only the
// tasks not yet seen finished (waiting on thousands of ids must not cost
// the workers a core), and once none is left, all of them again: a task
// seen failed may have gone back (cq retry) meanwhile, and the wait ends
// only when one look finds every task finished. A task that cleanup
// deletes while cq wait looks (retention shorter than the wait) ended
// before: cleanup deletes only finished tasks. It counts as it was last
// seen, or, if cq wait never saw it finished, as an end it cannot name.
type waiter struct {
	states func(ids []string) (map[string]queue.TaskStatus, error)
	seen   map[string]queue.TaskStatus // the last look at each task
	lost   map[string]bool             // deleted before seen finished
}

// look reads the tasks and says how many are not finished yet and, once
// none is, why each finished one that is not done counts against the
// wait.
func (w *waiter) look(ids []string) (pending int, bad []string, err error) {
	if w.seen == nil {
		w.seen, w.lost = map[string]queue.TaskStatus{}, map[string]bool{}
	}
	read := w.unfinished(ids)
	if err := w.read(read); err != nil {
		return 0, nil, err
	}
	left := w.unfinished(ids)
	if len(left) == 0 && len(read) < len(ids) {
		if err := w.read(ids); err != nil {
			return 0, nil, err
		}
		left = w.unfinished(ids)
	}
	if len(left) > 0 {
		return len(left), nil, nil
	}
	for _, id := range ids {
		if w.lost[id] {
			bad = append(bad, fmt.Sprintf("task %s was deleted (cq cleanup) before cq wait saw how it ended", id))
			continue
		}
		if t := w.seen[id]; t.State != queue.TaskDone {
			msg := fmt.Sprintf("task %s ended %s", id, t.State)
			if t.Reason != nil {
				msg += " (" + *t.Reason + ")"
			}
			bad = append(bad, msg)
		}
	}
	return 0, bad, nil
}

// unfinished lists the ids not yet seen finished (nor lost), once each.
func (w *waiter) unfinished(ids []string) []string {
	var out []string
	done := make(map[string]bool, len(ids))
	for _, id := range ids {
		if done[id] || w.lost[id] {
			continue
		}
		done[id] = true
		if t, ok := w.seen[id]; !ok || !queue.TaskTerminal(t.State) {
			out = append(out, id)
		}
	}
	return out
}

// read looks at ids once.
func (w *waiter) read(ids []string) error {
	got, err := w.states(ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if t, ok := got[id]; ok {
			w.seen[id] = t
		} else if last, ok := w.seen[id]; !ok || !queue.TaskTerminal(last.State) {
			w.lost[id] = true
		}
	}
	return nil
}

// waitActive is cq wait --active: it waits until every run live when it
// starts (of queue name, "" for all) has ended, however it ended, and
// never for a run that starts later (a retry of the same task
// included). 124 at the deadline names the runs still live.
func (a *App) waitActive(ctx context.Context, st *queue.Store, name string, deadline <-chan time.Time) error {
	// The set is fixed now, read in one snapshot.
	runs, err := st.ActiveRuns(ctx, name)
	if err != nil || len(runs) == 0 {
		return err
	}
	w := &activeWaiter{runs: runs, states: func(ids []string) (map[string]string, error) { return st.RunStates(ctx, ids) }}
	var line *waitLine
	if a.stderrIsTerminal() {
		line = &waitLine{w: a.Stderr, start: time.Now()}
	}
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	// While no one commits to the store, nothing is read again.
	changed, stopWatch, err := st.Backend().ChangeWatch(ctx)
	if err != nil {
		return err
	}
	defer stopWatch()
	for {
		if ch, err := changed(); err != nil || ch {
			err := w.look()
			if err != nil && ctx.Err() != nil {
				line.finish(w)
				return silentExit(exitInterrupted)
			}
			if err != nil {
				line.finish(w)
				return err
			}
			if w.left() == 0 {
				line.finish(w)
				return nil
			}
		}
		line.draw(w)
		select {
		case <-ctx.Done():
			line.finish(w)
			return silentExit(exitInterrupted)
		case <-deadline:
			// One last look, so the runs named are those still live at
			// the deadline.
			err := w.look()
			line.finish(w)
			if err != nil {
				return err
			}
			if w.left() == 0 {
				return nil
			}
			w.namePending(a.Stderr)
			return silentExit(exitTimeout)
		case <-tick.C:
		}
	}
}

// activeWaiter is one cq wait --active's view of the runs it waits for.
type activeWaiter struct {
	runs   []queue.ActiveRun
	states func(ids []string) (map[string]string, error)
	ended  map[string]bool   // by run id
	seen   map[string]string // a live run's state, as last read
}

// look reads the runs not yet seen ended. A run no longer stored was
// deleted with its task by cq cleanup, which deletes only ended tasks:
// it ended.
func (w *activeWaiter) look() error {
	if w.ended == nil {
		w.ended, w.seen = map[string]bool{}, map[string]string{}
	}
	var ids []string
	for _, r := range w.runs {
		if !w.ended[r.RunID] {
			ids = append(ids, r.RunID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	got, err := w.states(ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		s, ok := got[id]
		if !ok || queue.RunTerminal(s) {
			w.ended[id] = true
			continue
		}
		w.seen[id] = s
	}
	return nil
}

// left is how many runs have not been seen ended.
func (w *activeWaiter) left() int {
	return len(w.runs) - len(w.ended)
}

// text renders the counts for the live line, e.g. "2/5 ended · 3 active · 0:42".
func (w *activeWaiter) text(elapsed time.Duration) string {
	return fmt.Sprintf("%d/%d ended · %d active · %s", len(w.ended), len(w.runs), w.left(), clockText(elapsed))
}

// namePending writes one line per run not yet ended, as last seen.
func (w *activeWaiter) namePending(out io.Writer) {
	n := 0
	for _, r := range w.runs {
		if w.ended[r.RunID] {
			continue
		}
		if n == maxNamed {
			fmt.Fprintf(out, "cq: timed out; %d more runs not ended\n", w.left()-maxNamed)
			return
		}
		n++
		state := w.seen[r.RunID]
		if state == "" {
			state = r.State
		}
		fmt.Fprintf(out, "cq: timed out; task %s is still active (run %s %s)\n", r.TaskID, r.RunID, state)
	}
}
