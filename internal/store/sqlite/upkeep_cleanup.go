package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// Cleanup's statements: finding tasks past retention, deleting them in
// batches, and sweeping their events afterwards.
//
// No event write pays for an index of every event by its task
// (migrations/0007_events_task_ends.sql): the events of deleted tasks are deleted in two steps.
// TaskDelete reads, through events_task_ends, the window of seqs that
// holds each deleted task's events (from its task.created to its last
// terminal event); EventSweep later deletes the events of a window whose
// task is gone.

// The finished tasks of a state: finished_at IS NOT NULL repeats the
// condition of tasks_finished, which they read.
const (
	sqlExpiredCount = `SELECT COUNT(*) FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ?`
	sqlExpiredEach  = `SELECT id FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ? ORDER BY id`
	sqlExpiredList  = `SELECT id FROM tasks WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ? LIMIT ?`
)

// sqlTaskEnds reads the first and the last terminal event of each task
// of an id list (in, with its parentheses) through events_task_ends: its
// WHERE repeats the index's word for word. The last is NULL for a task
// with no terminal event (written into its state by hand).
const sqlTaskEnds = `SELECT MIN(seq), MAX(CASE WHEN kind != 'task.created' THEN seq END) FROM events
	WHERE task_id IN %s AND (kind = 'task.created' OR kind = 'task.done' OR kind = 'task.failed' OR kind = 'task.cancelled')
	GROUP BY task_id`

// sqlSweepEvents deletes the events of tasks no longer stored among the
// seqs ?1 to ?2 (events of no task, a queue's, stay).
const sqlSweepEvents = `DELETE FROM events WHERE seq BETWEEN ? AND ? AND task_id IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.id = events.task_id)`

// sqlDeleteTasks deletes the tasks of n ids still in the bound state.
// +state: the rows are found by id, never through tasks_state, which on
// a big store read every task of the state for each batch of 200.
func sqlDeleteTasks(n int) string {
	return `DELETE FROM tasks WHERE +state = ? AND id IN ` + inList(n) + ` RETURNING id`
}

// inList is the parenthesised list of n placeholders.
func inList(n int) string {
	return `(` + strings.TrimSuffix(strings.Repeat("?,", n), ",") + `)`
}

// runStoredBatch bounds the ids of one RunStored statement.
const runStoredBatch = 500

func (r reads) TaskExpiredCount(ctx context.Context, state, before string) (int, error) {
	var n int
	err := r.q.QueryRowContext(ctx, sqlExpiredCount, state, before).Scan(&n)
	return n, err
}

func (r reads) TaskExpiredEach(ctx context.Context, state, before string, fn func(id string) error) error {
	rows, err := r.q.QueryContext(ctx, sqlExpiredEach, state, before)
	return eachString(rows, err, fn)
}

func (r reads) TaskExpiredList(ctx context.Context, state, before string, limit int) ([]string, error) {
	return queryStrings(ctx, r.q, sqlExpiredList, state, before, limit)
}

func (r reads) RunIDsOfTasks(ctx context.Context, taskIDs []string) ([]string, error) {
	if len(taskIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(taskIDs))
	for i, id := range taskIDs {
		args[i] = id
	}
	return queryStrings(ctx, r.q, `SELECT id FROM runs WHERE task_id IN `+inList(len(taskIDs)), args...)
}

func (r reads) RunStored(ctx context.Context, ids []string) ([]string, error) {
	var out []string
	for len(ids) > 0 {
		n := min(len(ids), runStoredBatch)
		part := ids[:n]
		ids = ids[n:]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		found, err := queryStrings(ctx, r.q, `SELECT id FROM runs WHERE id IN `+inList(len(part)), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

func (t *Tx) TaskDelete(ctx context.Context, state string, ids []string) ([]string, []store.EventSpan, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, state)
	for _, id := range ids {
		args = append(args, id)
	}
	// The runs and the task's own edges go with it (ON DELETE CASCADE).
	deleted, err := queryStrings(ctx, t, sqlDeleteTasks(len(ids)), args...)
	if err != nil || len(deleted) == 0 {
		return nil, nil, err
	}
	in := inList(len(deleted))
	args = append(args[:0], state)
	for _, id := range deleted {
		args = append(args, id)
	}
	spans, err := t.eventSpans(ctx, in, args[1:])
	if err != nil {
		return nil, nil, err
	}
	// Their dependents remember how they ended (see sqlDeadDependency).
	if _, err := t.ExecContext(ctx, `UPDATE task_deps SET dep_end = ? WHERE dep_id IN `+in, args...); err != nil {
		return nil, nil, err
	}
	return deleted, spans, nil
}

// eventSpans reads the event spans of the tasks ids, bound to the
// placeholders of in.
func (t *Tx) eventSpans(ctx context.Context, in string, ids []any) ([]store.EventSpan, error) {
	rows, err := t.QueryContext(ctx, strings.Replace(sqlTaskEnds, "%s", in, 1), ids...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.EventSpan
	for rows.Next() {
		var lo int64
		var hi sql.NullInt64
		if err := rows.Scan(&lo, &hi); err != nil {
			return nil, err
		}
		out = append(out, store.EventSpan{First: lo, End: hi.Int64})
	}
	return out, rows.Err()
}

func (t *Tx) EventSweep(ctx context.Context, lo, hi int64) (int, error) {
	res, err := t.ExecContext(ctx, sqlSweepEvents, lo, hi)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
