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
			var deadline <-chan time.Time
			if timeout != "" {
				d, err := queue.ParseDuration(timeout)
				if err != nil {
					return usageErr("--timeout: %v", err)
				}
				if d < 0 {
					return usageErr("--timeout must not be negative")
				}
				deadline = time.After(d)
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
			w := waiter{get: func(id string) (*queue.Task, error) { return st.Get(ctx, id) }}
			for {
				pending, bad, err := w.look(ids)
				if err != nil && ctx.Err() != nil {
					return silentExit(exitInterrupted)
				}
				if err != nil {
					return err
				}
				if pending == 0 {
					for _, b := range bad {
						fmt.Fprintln(app.Stderr, "cq: "+b)
					}
					if len(bad) > 0 {
						return silentExit(exitError)
					}
					return nil
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

// waiter is one cq wait's view of its tasks. A task that cleanup deletes
// while cq wait looks (retention shorter than the wait) ended before:
// cleanup deletes only finished tasks. It counts as it was last seen, or,
// if cq wait never saw it finished, as an end it cannot name.
type waiter struct {
	get  func(id string) (*queue.Task, error)
	seen map[string]*queue.Task // the last look at each task
}

// look reads every task once: how many are not finished yet, and why
// each finished one that is not done counts against the wait.
func (w *waiter) look(ids []string) (pending int, bad []string, err error) {
	if w.seen == nil {
		w.seen = map[string]*queue.Task{}
	}
	for _, id := range ids {
		t, err := w.get(id)
		switch {
		case queue.IsNotFound(err):
			last := w.seen[id]
			if last == nil || !queue.TaskTerminal(last.State) {
				bad = append(bad, fmt.Sprintf("task %s was deleted (cq cleanup) before cq wait saw how it ended", id))
				continue
			}
			t = last
		case err != nil:
			return 0, nil, err
		}
		w.seen[id] = t
		switch {
		case !queue.TaskTerminal(t.State):
			pending++
		case t.State != queue.TaskDone:
			msg := fmt.Sprintf("task %s ended %s", t.ID, t.State)
			if t.Reason != nil {
				msg += " (" + *t.Reason + ")"
			}
			bad = append(bad, msg)
		}
	}
	return pending, bad, nil
}
