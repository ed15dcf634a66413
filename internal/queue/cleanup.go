package queue

import (
	"context"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
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
		var n int
		if err := s.DB.SQL.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ?`,
			st, FormatTime(now.Add(-r.of(st)))).Scan(&n); err != nil {
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
		rows, err := s.DB.SQL.QueryContext(ctx, `SELECT id FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ? ORDER BY id`,
			st, FormatTime(now.Add(-r.of(st))))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if err := fn(st, id); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
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
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		deleted, runIDs = deleted[:0], runIDs[:0]
		ids, err := queryIDs(ctx, tx, `SELECT id FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ? LIMIT ?`,
			state, FormatTime(now.Add(-r.of(state))), limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		in := `(` + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + `)`
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		if runIDs, err = queryIDs(ctx, tx, `SELECT id FROM runs WHERE task_id IN `+in, args...); err != nil {
			return err
		}
		if before != nil && len(runIDs) > 0 {
			if err := before(runIDs); err != nil {
				return err
			}
		}
		// The state is checked again: a task retried meanwhile is kept.
		deleted, err = queryIDs(ctx, tx, sqlDeleteTasks(len(ids)), append([]any{state}, args...)...)
		if err != nil || len(deleted) == 0 {
			return err
		}
		in = `(` + strings.TrimSuffix(strings.Repeat("?,", len(deleted)), ",") + `)`
		args = append(args[:0], state)
		for _, id := range deleted {
			args = append(args, id)
		}
		// Their events go in SweepEvents, from the windows noted here.
		if err := noteEventWindows(ctx, tx, now, in, args[1:]); err != nil {
			return err
		}
		// Their dependents remember how they ended (see sqlDeadDependency).
		_, err = tx.ExecContext(ctx, `UPDATE task_deps SET dep_end = ? WHERE dep_id IN `+in, args...)
		return err
	})
	return deleted, runIDs, err
}

// sqlDeleteTasks deletes the tasks of n ids still in the bound state.
// +state: the rows are found by id, never through tasks_state, which on
// a big store read every task of the state for each batch of 200.
func sqlDeleteTasks(n int) string {
	return `DELETE FROM tasks WHERE +state = ? AND id IN (` + strings.TrimSuffix(strings.Repeat("?,", n), ",") + `) RETURNING id`
}

// StoredRuns returns which of ids are runs in the store.
func (s *Store) StoredRuns(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		part := ids[:n]
		ids = ids[n:]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		found, err := queryIDs(ctx, s.DB.SQL, `SELECT id FROM runs WHERE id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")+`)`, args...)
		if err != nil {
			return nil, err
		}
		for _, id := range found {
			out[id] = true
		}
	}
	return out, nil
}

// IncrementalVacuum gives up to pages free pages back to the file system.
func (s *Store) IncrementalVacuum(ctx context.Context, pages int) (int, error) {
	var before, after int
	if err := s.DB.SQL.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&before); err != nil {
		return 0, err
	}
	if before == 0 {
		return 0, nil
	}
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, _ time.Time) error {
		rows, err := tx.QueryContext(ctx, `PRAGMA incremental_vacuum(`+itoa(pages)+`)`)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		rows.Close()
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	if err := s.DB.SQL.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&after); err != nil {
		return 0, err
	}
	return before - after, nil
}
