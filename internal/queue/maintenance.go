package queue

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// TimeoutQueuedRunsThen ends runs that stayed queued (claimed, never
// started) longer than their queue's start timeout: queued → timeout,
// transient class. The lease is void: the worker's queued → running CAS
// will lose. It calls stop for each run it ends, inside the transaction,
// before the commit (see ReapExpiredThen), and returns the runs it ended.
func (s *Store) TimeoutQueuedRunsThen(ctx context.Context, stop func(Reaped)) ([]Reaped, error) {
	var out []Reaped
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		out = out[:0]
		ln := s.leaseNow(now)
		qs, err := tx.QueueList(ctx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.StartTimeoutMS <= 0 {
				continue
			}
			limit := time.Duration(q.StartTimeoutMS) * time.Millisecond
			ids, err := tx.RunsStartLate(ctx, q.Name, ln.before(limit))
			if err != nil {
				return err
			}
			for _, id := range ids {
				r, err := getRun(ctx, tx, id)
				if err != nil {
					return err
				}
				o := Outcome{State: RunTimeout, Class: ClassTransient, Error: "start not recorded within " + limit.String()}
				if _, err := endRun(ctx, tx, now, r, o, "start_timeout"); err != nil {
					return err
				}
				out = append(out, reaped(r, RunQueued, RunTimeout))
				if stop != nil {
					stop(out[len(out)-1])
				}
			}
		}
		return nil
	})
	return out, err
}

// PromoteReady is the safety net behind the event-driven promotions: a
// blocked task that nothing blocks any more (no hold, every dependency
// done, no time to wait for) goes to todo. The dependency count is
// checked against the dependencies themselves, so a stale count heals too.
func (s *Store) PromoteReady(ctx context.Context) (int, error) {
	n := 0
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		n = 0
		// Only a task with dependency edges can have a count: a window
		// of the edges is read first.
		if lo, hi, ok, err := depWindow(ctx, tx, now, "deps_heal_after"); err != nil {
			return err
		} else if ok {
			if err := tx.TaskDepCountsHeal(ctx, lo, hi); err != nil {
				return err
			}
		}
		ready, err := tx.TaskBlockedReady(ctx, FormatTime(now))
		if err != nil {
			return err
		}
		n, err = promote(ctx, tx, now, ready, func(*taskRow) string { return "nothing blocks it" })
		return err
	})
	return n, err
}

// DepWindowEdges bounds how many dependency edges one pass of a
// dependency safety net reads.
const DepWindowEdges = 5000

// depWindow is the range (lo, hi] of dependent task ids that one pass of
// the safety net named key reads: the next DepWindowEdges edges after
// where its last pass stopped (kept in system_state), from the start
// again once a pass reached the end; ok is false when there are no edges.
// Edges stay while their tasks do, finished ones included: reading all of
// a million took about a second under the write lock, on every pass of
// every worker and of cq heartbeat. Passes come every 30 s per worker, so
// every edge is looked at within a few hundred passes; the event-driven
// cascade and promotions do the work on time.
func depWindow(ctx context.Context, tx store.Tx, now time.Time, key string) (lo, hi string, ok bool, err error) {
	if lo, _, err = tx.SystemStateGet(ctx, key); err != nil {
		return "", "", false, err
	}
	var last string
	var n int
	for {
		if last, n, err = tx.TaskDepsWindow(ctx, lo, DepWindowEdges); err != nil {
			return "", "", false, err
		}
		if n > 0 || lo == "" {
			break
		}
		lo = "" // past the end: from the start
	}
	if n == 0 {
		return "", "", false, nil // no edges: nothing to read or to note
	}
	next := last
	if n < DepWindowEdges {
		next = ""
	}
	if err := tx.SystemStateSet(ctx, key, next, FormatTime(now)); err != nil {
		return "", "", false, err
	}
	return lo, last, true, nil
}

// CancelOrphans is the safety net behind the event-driven cascade: a task
// still waiting on a dependency that ended failed or cancelled is
// cancelled, with the reason.
func (s *Store) CancelOrphans(ctx context.Context) (int, error) {
	n := 0
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		n = 0
		lo, hi, ok, err := depWindow(ctx, tx, now, "deps_orphans_after")
		if err != nil || !ok {
			return err
		}
		list, err := tx.TaskOrphans(ctx, lo, hi)
		if err != nil {
			return err
		}
		for _, o := range list {
			t, err := getTask(ctx, tx, o.ID)
			if err != nil {
				return err
			}
			if TaskTerminal(t.State) || t.State == TaskDoing {
				continue // cancelled meanwhile as another orphan's dependent
			}
			if err := cancelTask(ctx, tx, now, t, "dependency "+o.Dep+" "+o.DepState); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// WarnBatch is how many tasks per queue one WarnWaitingStep warns about.
const WarnBatch = 1000

// WarnWaitingStep records one task.waiting event for each task that has
// waited in todo longer than its queue's warn-after, once per entry into
// todo (seed 004: warn, never cancel). It is one transaction that warns
// about at most limit tasks per queue; more says that some queue may have
// more to warn about.
func (s *Store) WarnWaitingStep(ctx context.Context, limit int) (n int, more bool, err error) {
	err = s.write(ctx, func(tx store.Tx, now time.Time) error {
		n, more = 0, false
		qs, err := tx.QueueList(ctx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.WarnAfterMS <= 0 {
				continue
			}
			after := time.Duration(q.WarnAfterMS) * time.Millisecond
			ids, err := tx.TaskWaitingUnwarned(ctx, q.Name, FormatTime(now.Add(-after)), limit)
			if err != nil {
				return err
			}
			more = more || len(ids) == limit
			for _, id := range ids {
				if ok, err := tx.TaskWarnedSet(ctx, id); err != nil {
					return err
				} else if !ok {
					continue
				}
				if err := addEvent(ctx, tx, now, event{Kind: "task.waiting", TaskID: id, From: TaskTodo, To: TaskTodo,
					Reason: "waiting in todo longer than " + after.String(),
					Data:   map[string]any{"queue": q.Name, "warn_after": after.String()}}); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, more, err
}

// SetSystemState records key/value pairs in system_state (seed 001).
func (s *Store) SetSystemState(ctx context.Context, kv map[string]string) error {
	return s.write(ctx, func(tx store.Tx, now time.Time) error {
		for k, v := range kv {
			if err := tx.SystemStateSet(ctx, k, v, FormatTime(now)); err != nil {
				return err
			}
		}
		return nil
	})
}

// SystemState reads one system_state value; ok is false if it was never
// set.
func (s *Store) SystemState(ctx context.Context, key string) (string, bool, error) {
	return s.st.SystemStateGet(ctx, key)
}

// EndedRun names a run that has ended, with when.
type EndedRun = store.RunEnded

// EndedRunsAfter lists up to limit runs that ended after the run (after,
// afterID) in (ended_at, id) order, and before the time before.
func (s *Store) EndedRunsAfter(ctx context.Context, after, afterID string, before time.Time, limit int) ([]EndedRun, error) {
	return s.st.RunEndedList(ctx, after, afterID, FormatTime(before), limit)
}
