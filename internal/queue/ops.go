package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Resolve turns an id or a unique prefix of one into the full id. An exact
// id wins over a prefix; an ambiguous prefix is an error (exit 1) listing
// candidates.
func (s *Store) Resolve(ctx context.Context, ref string) (string, error) {
	return resolve(ctx, s.st, ref)
}

func resolve(ctx context.Context, q store.Reader, ref string) (string, error) {
	if ref == "" {
		return "", invalidf("empty task id")
	}
	if !ValidID(ref) {
		return "", notFoundf("no task %q", ref)
	}
	if ok, err := q.TaskExists(ctx, ref); err != nil {
		return "", err
	} else if ok {
		return ref, nil
	}
	ids, err := q.TaskIDsWithPrefix(ctx, ref, 6)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", notFoundf("no task %q", ref)
	case 1:
		return ids[0], nil
	}
	list := strings.Join(ids[:min(len(ids), 5)], ", ")
	if len(ids) > 5 {
		list += ", …"
	}
	return "", invalidf("prefix %q is ambiguous: %s", ref, list)
}

// mutate resolves ref and runs fn on the task's current row in one write
// transaction. It returns the task's id and the state it ended in.
func (s *Store) mutate(ctx context.Context, ref string, fn func(tx store.Tx, now time.Time, t *taskRow) error) (string, string, error) {
	var id, state string
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		var err error
		id, err = resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		t, err := getTask(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(tx, now, t); err != nil {
			return err
		}
		state, err = tx.TaskState(ctx, id)
		return err
	})
	return id, state, err
}

func refused(t *taskRow, what string) error {
	st := t.State
	if t.State == TaskBlocked && t.BlockedReason != "" {
		st += " (" + t.BlockedReason + ")"
	}
	return conflictf("cannot %s task %s: it is %s", what, t.ID, st)
}

// Enqueue is the gateway step: an inbox task goes to todo, or blocked if
// something blocks it. It returns the full id and the new state.
func (s *Store) Enqueue(ctx context.Context, ref string) (string, string, error) {
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		return enqueueTask(ctx, tx, now, t, "")
	})
}

func enqueueTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string) error {
	if t.State != TaskInbox {
		return refused(t, "enqueue")
	}
	_, err := enterLane(ctx, tx, now, t, reason, true)
	return err
}

// Cancel cancels a task: inbox, todo and blocked tasks end cancelled at
// once (their dependents too); a doing task's run is asked to stop
// (running → cancelling) and the worker finishes the job.
func (s *Store) Cancel(ctx context.Context, ref, reason string) (string, string, error) {
	if reason == "" {
		reason = "cancelled by user"
	}
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		return cancelByUser(ctx, tx, now, t, reason, s.StopCancelled)
	})
}

func cancelByUser(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string, stop func(Reaped)) error {
	switch t.State {
	case TaskInbox, TaskTodo, TaskBlocked:
		return cancelTask(ctx, tx, now, t, reason)
	case TaskDoing:
		return cancelDoing(ctx, tx, now, t, reason, stop)
	}
	return refused(t, "cancel")
}

// cancelDoing asks the live run of a doing task to stop. A run not yet
// started is cancelled outright with its task (stop, if set, is then told
// of it before the commit; see Store.StopCancelled); a running one goes to
// cancelling for its worker to confirm; one already cancelling is left.
func cancelDoing(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string, stop func(Reaped)) error {
	runID, state, err := tx.RunLiveOfTask(ctx, t.ID)
	if err != nil {
		return err
	}
	if runID == "" {
		return conflictf("task %s is doing but has no live run; try again", t.ID)
	}
	switch state {
	case RunCancelling:
		return nil
	case RunRunning:
		if err := casRun(ctx, tx, now, runID, t.ID, RunRunning, RunCancelling, reason, ""); err != nil {
			return err
		}
		// A question the run waits on is denied now, not left to the kill.
		return denyOpen(ctx, tx, now, []string{runID}, DenyCancelled, nil)
	default: // queued
		if err := casRun(ctx, tx, now, runID, t.ID, RunQueued, RunCancelled, reason, FormatTime(now)); err != nil {
			return err
		}
		// Its process may have asked before its start was recorded.
		if err := denyOpen(ctx, tx, now, []string{runID}, DenyCancelled, nil); err != nil {
			return err
		}
		if stop != nil {
			r, err := getRun(ctx, tx, runID)
			if err != nil {
				return err
			}
			stop(reaped(r, RunQueued, RunCancelled))
		}
		return cancelTask(ctx, tx, now, t, reason)
	}
}

// casRun moves a run from one state to another, stamping its end
// (endedAt, unless ""), and records the event.
func casRun(ctx context.Context, tx store.Tx, now time.Time, runID, taskID, from, to, reason, endedAt string) error {
	ok, err := tx.RunCancelStep(ctx, store.RunCancel{ID: runID, From: from, To: to, Reason: reason, EndedAt: endedAt})
	if err != nil {
		return err
	}
	if !ok {
		var cur string
		if r, err := tx.RunGet(ctx, runID); err == nil {
			cur = r.State
		}
		return conflictf("run %s is %s, not %s", runID, cur, from)
	}
	return addEvent(ctx, tx, now, event{Kind: "run." + to, TaskID: taskID, RunID: runID, From: from, To: to, Reason: reason})
}

// Hold adds a hold to an inbox, todo or blocked task. A todo task goes to
// blocked; the others keep their state. Holding a held task is a no-op.
// The task's reason becomes the hold's, so cq show says why it is held;
// a release replaces it with the release's (or none).
func (s *Store) Hold(ctx context.Context, ref, reason string) (string, string, error) {
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		return holdTask(ctx, tx, now, t, reason)
	})
}

func holdTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string) error {
	switch t.State {
	case TaskInbox, TaskBlocked:
		if t.Hold {
			return nil
		}
		u := store.TaskUpdate{Set: store.SetHold | store.SetReason, Hold: true, Reason: reason}
		if t.State == TaskBlocked {
			u.Set |= store.SetBlockedReason
			u.BlockedReason = BlockedHold
		}
		return casSame(ctx, tx, now, t, "task.held", reason, u)
	case TaskTodo:
		return casTask(ctx, tx, now, t, TaskBlocked, "task.held", reason, store.TaskUpdate{
			Set:  store.SetHold | store.SetBlockedReason | store.SetTodoAt | store.SetReason,
			Hold: true, BlockedReason: BlockedHold, Reason: reason})
	}
	return refused(t, "hold")
}

// casSame changes a task's fields without changing its state, guarded by
// the state it was read in, and records the event (from = to).
func casSame(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, kind, reason string, u store.TaskUpdate) error {
	u.ID, u.From, u.To, u.At = t.ID, t.State, t.State, FormatTime(now)
	ok, err := tx.TaskUpdate(ctx, u)
	if err != nil {
		return err
	}
	if !ok {
		return conflictf("task %s changed state meanwhile; try again", t.ID)
	}
	return addEvent(ctx, tx, now, event{Kind: kind, TaskID: t.ID, From: t.State, To: t.State, Reason: reason})
}

// Release removes a task's hold. A blocked task with nothing else blocking
// it goes to todo.
func (s *Store) Release(ctx context.Context, ref, reason string) (string, string, error) {
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		return releaseTask(ctx, tx, now, t, reason)
	})
}

func releaseTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string) error {
	if !t.Hold || (t.State != TaskInbox && t.State != TaskBlocked) {
		if t.State == TaskInbox || t.State == TaskBlocked || t.State == TaskTodo {
			return conflictf("cannot release task %s: it is %s without a hold", t.ID, t.State)
		}
		return refused(t, "release")
	}
	if t.State == TaskInbox {
		return casSame(ctx, tx, now, t, "task.released", reason, store.TaskUpdate{Set: store.SetHold | store.SetReason, Reason: reason})
	}
	br := blockedReason(false, t.DepsLeft, t.NotBefore, t.NotBeforeWhy, now)
	if br != "" {
		return casSame(ctx, tx, now, t, "task.released", reason, store.TaskUpdate{
			Set: store.SetHold | store.SetBlockedReason | store.SetReason, BlockedReason: br, Reason: reason})
	}
	return casTask(ctx, tx, now, t, TaskTodo, "task.released", reason, store.TaskUpdate{
		Set:    store.SetHold | store.SetBlockedReason | store.SetNotBefore | store.SetTodoAt | store.ClearWarned | store.SetReason,
		TodoAt: FormatTime(now), Reason: reason})
}

// Retry gives a task fresh retry budgets and: failed or cancelled → todo
// (or blocked if a hold or an unmet dependency remains), at the back of its
// key lane; blocked only by a retry backoff or a schedule → todo now.
func (s *Store) Retry(ctx context.Context, ref, reason string) (string, string, error) {
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		return retryTask(ctx, tx, now, t, reason)
	})
}

func retryTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string) error {
	switch t.State {
	case TaskFailed, TaskCancelled:
		if dep, why, err := deadDependency(ctx, tx, t.ID); err != nil {
			return err
		} else if dep != "" {
			return conflictf("cannot retry task %s: %s", t.ID, why)
		}
		if t.Unique {
			h, err := tx.TaskKeyHolder(ctx, t.Key, t.ID)
			if err != nil {
				return err
			}
			if h != nil {
				return &Error{Kind: Conflict, Existing: h.ID, ExistingState: h.State, Msg: fmt.Sprintf("cannot retry task %s: key %q is held by task %s (--unique)", t.ID, t.Key, h.ID)}
			}
		}
		left, err := tx.TaskDepsNotDone(ctx, t.ID)
		if err != nil {
			return err
		}
		if err := tx.TaskRetryReset(ctx, t.ID, t.State, left); err != nil {
			return err
		}
		t.DepsLeft, t.NotBefore, t.NotBeforeWhy = left, "", ""
		if reason == "" {
			reason = "retried by user"
		}
		_, err = enterLane(ctx, tx, now, t, reason, true)
		return err
	case TaskBlocked:
		if t.Hold || t.DepsLeft > 0 || t.NotBefore == "" {
			return refused(t, "retry")
		}
		if reason == "" {
			reason = "retried by user"
		}
		return casTask(ctx, tx, now, t, TaskTodo, "", reason, store.TaskUpdate{
			Set:    store.SetBlockedReason | store.SetNotBefore | store.SetTodoAt | store.ClearWarned | store.ResetFails,
			TodoAt: FormatTime(now)})
	}
	return refused(t, "retry")
}

// SetState is the generic form of enqueue, release, retry, hold and
// cancel. It refuses (conflict) any other target, any transition those
// commands would refuse, and an outcome other than the requested state;
// a refusal changes nothing. A cancel of a doing task is the one
// outcome that is not known at once: its run is asked to stop (as cq
// cancel does), the change is kept, and the state returned is doing,
// for the caller to wait until its worker confirms (see SetStatePending).
func (s *Store) SetState(ctx context.Context, ref, target, reason string) (string, string, error) {
	if !ValidTaskState(target) {
		return "", "", invalidf("unknown state %q (want one of %s)", target, strings.Join(TaskStates, ", "))
	}
	return s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		var err error
		switch target {
		case TaskTodo:
			switch {
			case t.State == TaskInbox:
				err = enqueueTask(ctx, tx, now, t, reason)
			case t.State == TaskBlocked && t.Hold:
				err = releaseTask(ctx, tx, now, t, reason)
			default:
				err = retryTask(ctx, tx, now, t, reason)
			}
		case TaskBlocked:
			if t.State == TaskBlocked && t.Hold {
				return nil
			}
			err = holdTask(ctx, tx, now, t, reason)
		case TaskCancelled:
			if reason == "" {
				reason = "cancelled by user"
			}
			err = cancelByUser(ctx, tx, now, t, reason, s.StopCancelled)
		default:
			return conflictf("cannot set task %s to %s: it is %s, and only todo, blocked and cancelled can be requested", t.ID, target, t.State)
		}
		if err != nil {
			return err
		}
		state, err := tx.TaskState(ctx, t.ID)
		if err != nil {
			return err
		}
		if state != target && !SetStatePending(target, state) {
			return conflictf("cannot set task %s to %s: it is %s and would end %s; nothing changed", t.ID, target, t.State, state)
		}
		return nil
	})
}

// SetStatePending reports whether SetState to target, having left the
// task in state, asked a worker to stop its run: a cancel of a doing
// task, whose end only the worker (or the reaper) records.
func SetStatePending(target, state string) bool {
	return target == TaskCancelled && state == TaskDoing
}
