package queue

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Retention says how long terminal tasks are kept, by finish time.
type Retention struct {
	Done, Cancelled, Failed time.Duration
}

// DefaultRetention is cq cleanup's default: done 30 days, cancelled 7, failed 14.
func DefaultRetention() Retention {
	return Retention{Done: 30 * 24 * time.Hour, Cancelled: 7 * 24 * time.Hour, Failed: 14 * 24 * time.Hour}
}

func (r Retention) of(state string) time.Duration {
	switch state {
	case TaskDone:
		return r.Done
	case TaskCancelled:
		return r.Cancelled
	}
	return r.Failed
}

// CleanupStates are the states cleanup removes, in the order it reports them.
var CleanupStates = []string{TaskDone, TaskCancelled, TaskFailed}

// ExpiredCounts counts, per terminal state, the tasks past retention.
func (s *Store) ExpiredCounts(ctx context.Context, r Retention) (map[string]int, error) {
	now := s.now()
	out := map[string]int{}
	for _, st := range CleanupStates {
		n, err := s.st.TaskExpiredCount(ctx, st, FormatTime(now.Add(-r.of(st))))
		if err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, nil
}

// ExpiredIDs calls fn with the id of every task past retention, state by
// state in CleanupStates order (what a cleanup would delete now).
func (s *Store) ExpiredIDs(ctx context.Context, r Retention, fn func(state, id string) error) error {
	now := s.now()
	for _, st := range CleanupStates {
		if err := s.st.TaskExpiredEach(ctx, st, FormatTime(now.Add(-r.of(st))), func(id string) error { return fn(st, id) }); err != nil {
			return err
		}
	}
	return nil
}

// DeleteExpired deletes up to limit tasks in state past their retention,
// with their runs and dependency edges, in one short transaction, and
// notes where their events are for SweepEvents to delete them.
// It returns the deleted tasks' run ids, so the caller can remove their
// folders, and how many tasks it deleted (0: nothing left).
func (s *Store) DeleteExpired(ctx context.Context, state string, r Retention, limit int) (int, []string, error) {
	ids, runIDs, err := s.DeleteExpiredThen(ctx, state, r, limit, nil)
	return len(ids), runIDs, err
}

// DeleteExpiredThen is DeleteExpired, returning the deleted tasks' ids,
// calling before, inside the
// transaction and before it deletes anything, with the run ids whose
// folders the caller will remove after the commit: the caller notes them
// where a later cleanup finds them if this process dies in between. An
// error from before rolls the transaction back.
func (s *Store) DeleteExpiredThen(ctx context.Context, state string, r Retention, limit int, before func(runIDs []string) error) ([]string, []string, error) {
	var deleted, runIDs []string
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		deleted, runIDs = deleted[:0], runIDs[:0]
		ids, err := tx.TaskExpiredList(ctx, state, FormatTime(now.Add(-r.of(state))), limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		if runIDs, err = tx.RunIDsOfTasks(ctx, ids); err != nil {
			return err
		}
		if before != nil && len(runIDs) > 0 {
			if err := before(runIDs); err != nil {
				return err
			}
		}
		// The state is checked again: a task retried meanwhile is kept.
		var spans []store.EventSpan
		deleted, spans, err = tx.TaskDelete(ctx, state, ids)
		if err != nil || len(deleted) == 0 {
			return err
		}
		// Their events go in SweepEvents, from the windows noted here.
		return noteEventWindows(ctx, tx, now, spans, len(deleted))
	})
	return deleted, runIDs, err
}

// StoredRuns returns which of ids are runs in the store.
func (s *Store) StoredRuns(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	found, err := s.st.RunStored(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// IncrementalVacuum gives up to pages free pages back to the file system.
func (s *Store) IncrementalVacuum(ctx context.Context, pages int) (int, error) {
	before, err := s.st.FreePagesCount(ctx)
	if err != nil {
		return 0, err
	}
	if before == 0 {
		return 0, nil
	}
	err = s.write(ctx, func(tx store.Tx, _ time.Time) error {
		return tx.FreePagesRelease(ctx, pages)
	})
	if err != nil {
		return 0, err
	}
	after, err := s.st.FreePagesCount(ctx)
	if err != nil {
		return 0, err
	}
	return before - after, nil
}
