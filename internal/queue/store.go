// Package queue is cq's domain: tasks, runs, their state machines, key
// lanes, dependencies, retries and leases. It decides what changes and
// says so through the operations of internal/store, whatever the backend
// (docs/store.md). Each state change is a compare-and-set on the state
// the task or run was read in, committed in the same transaction as the
// event that records it.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/store"
)

// Store is the task store over one database.
type Store struct {
	// st is the database: every statement goes through it.
	st store.Store
	// Now is the wall clock, for every time a user reads or writes;
	// tests replace it to move time without waiting.
	Now func() time.Time
	// Boot is the clock leases expire on and the start timeout counts on
	// (see leaseNow); tests that move Now to expire leases move it too
	// (clock.Following).
	Boot func() clock.BootTime
	// StopCancelled, when set, is called inside the transaction of a
	// user's cancel that ends a run still queued (queued →
	// cancelled), before it commits and so before the task's key lane is
	// free: its worker may have started the process and not yet recorded
	// the start (a worker stalled there would leave it running). cq sets it
	// to kill such processes on this host, as the reaper does.
	StopCancelled func(Reaped)
	// perRow, set by tests only, records every start and end with its
	// own statements, as the batched paths must match.
	perRow bool
}

// New returns a Store over the database b using the host's clocks, or
// the database's when it keeps its own (store.Host's Clock): then leases
// are judged on that clock alone.
func New(b store.Store) *Store {
	if c := b.Clock(); c != nil {
		return &Store{st: b, Now: c}
	}
	return &Store{st: b, Now: clock.Wall, Boot: clock.Boot}
}

// Backend is the database the Store keeps its tasks in.
func (s *Store) Backend() store.Store { return s.st }

func (s *Store) now() time.Time { return s.Now().UTC() }

// write runs fn in one write transaction.
func (s *Store) write(ctx context.Context, fn func(tx store.Tx, now time.Time) error) error {
	return s.st.Write(ctx, func(tx store.Tx) error { return fn(tx, s.now()) })
}

// taskRow is a tasks row as stored.
type taskRow = store.Task

func getTask(ctx context.Context, q store.Reader, id string) (*taskRow, error) {
	t, err := q.TaskGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no task %q", id)
	}
	return t, err
}

// blockedReason names the first condition that still blocks a task, in
// the documented order (hold, dependency, retry, scheduled), or "" when
// nothing does.
func blockedReason(hold bool, depsLeft int, notBefore, why string, now time.Time) string {
	switch {
	case hold:
		return BlockedHold
	case depsLeft > 0:
		return BlockedDependency
	case notBefore != "" && notBefore > FormatTime(now):
		if why == "" {
			return BlockedScheduled
		}
		return why
	}
	return ""
}

// nextSeq is a place for a task entering its lane now, taken after the
// lane's key was read (laneIsFree), so that lane order is the order in
// which the key's writers went.
func nextSeq(ctx context.Context, tx store.Tx) (int64, error) {
	return tx.TaskSeqNext(ctx)
}

// event is one row of the event log.
type event struct {
	Kind, TaskID, RunID, From, To, Reason string
	Data                                  any
}

// rawJSON is event data already encoded.
type rawJSON string

func addEvent(ctx context.Context, tx store.Tx, now time.Time, e event) error {
	var data string
	if r, ok := e.Data.(rawJSON); ok {
		data = string(r)
	} else if e.Data != nil {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return err
		}
		data = string(b)
	}
	return tx.EventAdd(ctx, store.Event{At: FormatTime(now), Kind: e.Kind, TaskID: e.TaskID, RunID: e.RunID,
		From: e.From, To: e.To, Reason: e.Reason, Data: data})
}

// laneIsFree reports whether no live task holds key's lane, so a task
// entering it becomes its head.
func laneIsFree(ctx context.Context, tx store.Tx, key, exceptID string) (bool, error) {
	if key == "" {
		return true, nil
	}
	held, err := tx.TaskLaneHeld(ctx, key, exceptID)
	return !held, err
}

// advanceLane hands key's lane to its next task after its head left it.
func advanceLane(ctx context.Context, tx store.Tx, key string) error {
	if key == "" {
		return nil
	}
	return tx.TaskLaneAdvance(ctx, key)
}

// casTask moves a task from one state to another, writing the fields u
// sets (its ID, From, To and At are filled in here), and records the
// event. A lost CAS returns a conflict naming the state the task is in
// now.
func casTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, to, kind, reason string, u store.TaskUpdate) error {
	u.ID, u.From, u.To, u.At = t.ID, t.State, to, FormatTime(now)
	ok, err := tx.TaskUpdate(ctx, u)
	if err != nil {
		return err
	}
	if !ok {
		cur, err := getTask(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		return conflictf("task %s is %s, not %s", t.ID, cur.State, t.State)
	}
	if kind == "" {
		kind = "task." + to
	}
	return addEvent(ctx, tx, now, event{Kind: kind, TaskID: t.ID, From: t.State, To: to, Reason: reason})
}

// todoNow is the update of a blocked task that nothing blocks any more:
// todo from now.
func todoNow(now time.Time) store.TaskUpdate {
	return store.TaskUpdate{Set: store.SetBlockedReason | store.SetNotBefore | store.SetTodoAt | store.ClearWarned, TodoAt: FormatTime(now)}
}

// enterLane moves a task into todo or blocked (from inbox at the gateway,
// or from failed/cancelled on cq retry): it takes the next seq, which puts
// it at the back of its key lane, and becomes the lane's head if the lane
// is free. If a dependency already ended failed or cancelled it is
// cancelled instead.
func enterLane(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string, mayHaveDeps bool) (string, error) {
	if mayHaveDeps {
		if dead, why, err := deadDependency(ctx, tx, t.ID); err != nil {
			return "", err
		} else if dead != "" {
			return TaskCancelled, cancelTask(ctx, tx, now, t, why)
		}
	}
	br := blockedReason(t.Hold, t.DepsLeft, t.NotBefore, t.NotBeforeWhy, now)
	to := TaskTodo
	if br != "" {
		to = TaskBlocked
	}
	free, err := laneIsFree(ctx, tx, t.Key, t.ID)
	if err != nil {
		return "", err
	}
	seq, err := nextSeq(ctx, tx)
	if err != nil {
		return "", err
	}
	todoAt := ""
	if to == TaskTodo {
		todoAt = FormatTime(now)
	}
	err = casTask(ctx, tx, now, t, to, "", reason, store.TaskUpdate{
		Set: store.SetSeq | store.SetLaneHead | store.SetBlockedReason | store.SetTodoAt | store.ClearWarned | store.SetFinishedAt | store.SetReason,
		Seq: seq, LaneHead: free, BlockedReason: br, TodoAt: todoAt, Reason: reason})
	return to, err
}

// deadDependency returns a dependency of id that ended failed or
// cancelled, with the reason a dependent is cancelled for it.
func deadDependency(ctx context.Context, tx store.Tx, id string) (string, string, error) {
	dep, state, err := tx.TaskDeadDependency(ctx, id)
	if err != nil || dep == "" {
		return "", "", err
	}
	return dep, "dependency " + dep + " " + state, nil
}

// cancelTask ends a task that is not running (inbox, todo, blocked; or
// doing whose run is being cancelled) as cancelled, hands its lane on, and
// cancels its dependents, transitively.
func cancelTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, reason string) error {
	wasInLane := t.State == TaskTodo || t.State == TaskBlocked || t.State == TaskDoing
	err := casTask(ctx, tx, now, t, TaskCancelled, "", reason, store.TaskUpdate{
		Set:        store.SetLaneHead | store.SetBlockedReason | store.SetFinishedAt | store.SetReason,
		FinishedAt: FormatTime(now), Reason: reason})
	if err != nil {
		return err
	}
	if wasInLane && t.LaneHead {
		if err := advanceLane(ctx, tx, t.Key); err != nil {
			return err
		}
	}
	return cancelDependents(ctx, tx, now, t.ID, "dependency "+t.ID+" cancelled")
}

// cancelDependents cancels every task still waiting on dep.
func cancelDependents(ctx context.Context, tx store.Tx, now time.Time, dep, reason string) error {
	deps, err := tx.TaskDependentsWaiting(ctx, dep)
	if err != nil {
		return err
	}
	for _, t := range deps {
		// Read again: a task reached by two paths (a diamond: it waits on
		// dep and on another of dep's dependents) was cancelled already
		// by the cancel of an earlier one in this list.
		cur, err := getTask(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if TaskTerminal(cur.State) || cur.State == TaskDoing {
			continue
		}
		if err := cancelTask(ctx, tx, now, cur, reason); err != nil {
			return err
		}
	}
	return nil
}

// ensureQueue records that a queue exists, with default settings.
func ensureQueue(ctx context.Context, tx store.Tx, now time.Time, name string) error {
	return tx.QueueEnsure(ctx, name, FormatTime(now))
}
