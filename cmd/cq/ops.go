package main

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cq-dev/cq/internal/queue"

	"github.com/spf13/cobra"
)

// stateOp is the shape of every per-task operation of the store.
type stateOp func(ctx context.Context, ref, reason string) (id, state string, err error)

// taskOps are the per-task operations of cq cancel, retry, hold and
// release, by name: cq serve's POST /tasks/{id}/NAME runs the same.
var taskOps = map[string]func(st *queue.Store) stateOp{
	"cancel":  func(st *queue.Store) stateOp { return st.Cancel },
	"retry":   func(st *queue.Store) stateOp { return st.Retry },
	"hold":    func(st *queue.Store) stateOp { return st.Hold },
	"release": func(st *queue.Store) stateOp { return st.Release },
}

// newTaskOpCmd builds cancel, retry, hold and release: several ids, each
// handled on its own (docs/commands.md, Exit codes).
func newTaskOpCmd(app *App, use, short string, op func(st *queue.Store) stateOp) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   use + " ID…",
		Short: short,
		Args:  minArgs(1, use+" needs at least one task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkReason(reason); err != nil {
				return err
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			fn := op(st)
			return multi(app.Stderr, args, func(ref string) error {
				id, state, err := fn(cmd.Context(), ref, reason)
				if err != nil {
					return err
				}
				return app.printOutcome(id, state)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the event")
	return cmd
}

// checkReason refuses a --reason that is not UTF-8: it is stored in
// events and shown in tables and JSON, as a spec's strings are.
func checkReason(reason string) error {
	if !utf8.ValidString(reason) {
		return usageErr("--reason is not valid UTF-8")
	}
	return nil
}

// printOutcome reports a changed task: nothing by default (the change is
// the output), its id with -q, {id, state} with -o json/jsonl.
func (a *App) printOutcome(id, state string) error {
	switch {
	case a.Quiet:
		fmt.Fprintln(a.Stdout, id)
	case a.format() == "json" || a.format() == "jsonl":
		return writeJSONLine(a.Stdout, map[string]string{"id": id, "state": state})
	}
	return nil
}

func newCancelCmd(app *App) *cobra.Command {
	return newTaskOpCmd(app, "cancel", "Cancel tasks (a running one is stopped by its worker)", taskOps["cancel"])
}

func newRetryCmd(app *App) *cobra.Command {
	cmd := newTaskOpCmd(app, "retry", "Retry failed or cancelled tasks, or start a backing-off one now", taskOps["retry"])
	var deps bool
	plain := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !deps {
			return plain(cmd, args)
		}
		reason, _ := cmd.Flags().GetString("reason")
		if err := checkReason(reason); err != nil {
			return err
		}
		return retryDeps(cmd, app, args, reason)
	}
	cmd.Flags().BoolVar(&deps, "deps", false, "also the dependents its end cancelled, transitively, each blocked on its dependency again")
	return cmd
}

func newHoldCmd(app *App) *cobra.Command {
	return newTaskOpCmd(app, "hold", "Hold tasks until cq release", taskOps["hold"])
}

func newReleaseCmd(app *App) *cobra.Command {
	return newTaskOpCmd(app, "release", "Remove the hold from tasks", taskOps["release"])
}

func newSetStateCmd(app *App) *cobra.Command {
	var reason, timeout string
	cmd := &cobra.Command{
		Use:   "set-state ID STATE",
		Short: "Move a task to todo (enqueue, release, retry), blocked (hold) or cancelled",
		Long: `STATE todo enqueues, releases or retries the task (whichever its state
calls for), blocked holds it, cancelled cancels it. A doing task's run is
asked to stop, and set-state waits until its worker confirms: exit 0 once
the task is cancelled, 3 if its run succeeded first and the task is done
(or --timeout came first; the cancel stands). Any other refusal exits 3
and changes nothing.`,
		Args: exactArgs(2, "set-state takes a task id and a state"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkReason(reason); err != nil {
				return err
			}
			deadline, err := timeoutFlag(cmd, timeout)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			id, state, err := st.SetState(ctx, args[0], args[1], reason)
			if err != nil {
				return err
			}
			if queue.SetStatePending(args[1], state) {
				if state, err = awaitEnd(ctx, st, id, deadline); err != nil {
					return err
				}
				if state != args[1] {
					return &queue.Error{Kind: queue.Conflict,
						Msg: fmt.Sprintf("task %s ended %s: its run finished before the cancel took effect", id, state)}
				}
			}
			return app.printOutcome(id, state)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the event")
	cmd.Flags().StringVar(&timeout, "timeout", "", "when cancelling a doing task, give up waiting for its worker after this long (exit 3)")
	return cmd
}

// awaitEnd waits until task id is terminal and returns its state. It
// reads the store only after a commit (as cq wait does). The deadline
// (nil: none) is a conflict, since the task has not reached the state
// asked; an interrupt exits as cq wait's does.
func awaitEnd(ctx context.Context, st *queue.Store, id string, deadline <-chan time.Time) (string, error) {
	changed, stopWatch, err := st.Backend().ChangeWatch(ctx)
	if err != nil {
		return "", err
	}
	defer stopWatch()
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for {
		if ch, err := changed(); err != nil || ch {
			got, err := st.TaskStatuses(ctx, []string{id})
			if err != nil && ctx.Err() != nil {
				return "", silentExit(exitInterrupted)
			}
			if err != nil {
				return "", err
			}
			t, ok := got[id]
			if !ok {
				return "", &queue.Error{Kind: queue.Conflict,
					Msg: fmt.Sprintf("task %s was deleted (cq cleanup) before set-state saw how it ended", id)}
			}
			if queue.TaskTerminal(t.State) {
				return t.State, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", silentExit(exitInterrupted)
		case <-deadline:
			return "", &queue.Error{Kind: queue.Conflict,
				Msg: fmt.Sprintf("task %s is still doing: its worker has not confirmed the cancel yet (it stands)", id)}
		case <-tick.C:
		}
	}
}
