package main

import (
	"fmt"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

// waitPoll is how often cq wait and cq logs --follow look again.
const waitPoll = 100 * time.Millisecond

func newWaitCmd(app *App) *cobra.Command {
	var timeout string
	cmd := &cobra.Command{
		Use:   "wait ID…",
		Short: "Block until every task is done, failed or cancelled",
		Long: `Exit codes: 0 all done; 1 any ended failed or cancelled (named on stderr);
124 the --timeout came first; 4 an unknown id (at once); 130 (143)
interrupted by SIGINT (SIGTERM).`,
		Args: minArgs(1, "wait needs at least one task id"),
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
			// Every id is looked up and every bad one reported (SPEC
			// section 5); then, if any was bad, the first one's code.
			ids := make([]string, 0, len(args))
			if err := multi(app.Stderr, args, func(ref string) error {
				id, err := findAfterDrain(ctx, app, func() (string, error) { return st.Resolve(ctx, ref) })
				ids = append(ids, id)
				return err
			}); err != nil {
				return err
			}
			tick := time.NewTicker(waitPoll)
			defer tick.Stop()
			w := waiter{states: func(ids []string) (map[string]queue.TaskStatus, error) { return st.TaskStatuses(ctx, ids) }}
			// While no one commits to the store, nothing is read again.
			changed, stopWatch, err := st.DB.ChangeWatch(ctx)
			if err != nil {
				return err
			}
			defer stopWatch()
			for {
				if ch, err := changed(); err != nil || ch {
					pending, bad, err := w.look(ids)
					if err != nil && ctx.Err() != nil {
						return silentExit(exitInterrupted)
					}
					if err != nil {
						return err
					}
					if pending == 0 {
						for _, b := range bad {
							fmt.Fprintln(app.Stderr, "cq: "+oneLine(b))
						}
						if len(bad) > 0 {
							return silentExit(exitError)
						}
						return nil
					}
				}
				select {
				case <-ctx.Done():
					return silentExit(exitInterrupted)
				case <-deadline:
					return silentExit(exitTimeout)
				case <-tick.C:
				}
			}
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "give up after this long (exit 124)")
	return cmd
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
