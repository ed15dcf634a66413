package postgres

import (
	"context"
	"slices"

	"github.com/cq-dev/cq/internal/store"
)

// Cleanup's statements: finding tasks past retention, deleting them in
// batches, and sweeping their events afterwards.
//
// No event write pays for an index of every event by its task: the
// events of deleted tasks are deleted in two steps. TaskDelete reads,
// through events_task_ends, the span of seqs that holds each deleted
// task's events (from its task.created to its last terminal event);
// EventSweep later deletes the events of a span whose task is gone.

// The finished tasks of a state: finished_at IS NOT NULL repeats the
// condition of tasks_finished, which they read.
const (
	sqlExpiredCount = `SELECT count(*) FROM tasks WHERE state = $1 AND finished_at IS NOT NULL AND finished_at < $2`
	// sqlExpiredPage is the next page of them by id, after an id.
	sqlExpiredPage = `SELECT id FROM tasks WHERE state = $1 AND finished_at IS NOT NULL AND finished_at < $2 AND id > $3
		ORDER BY id LIMIT $4`
	sqlExpiredList = `SELECT id FROM tasks WHERE state = $1 AND finished_at IS NOT NULL AND finished_at < $2 LIMIT $3`
)

// expiredPage bounds the ids TaskExpiredEach holds in memory at once.
const expiredPage = 1000

// runStoredBatch bounds the ids of one RunStored statement.
const runStoredBatch = 10000

const (
	// sqlDeleteTasks deletes the tasks of an id list still in a state;
	// their runs (the trigger on runs counting off any live one) and
	// their own dependency edges go with them (ON DELETE CASCADE).
	sqlDeleteTasks = `DELETE FROM tasks WHERE state = $1 AND id = ANY($2::text[]) RETURNING id`
	// sqlTaskEnds reads the first and the last terminal event of each
	// task of an id list through events_task_ends, whose condition its
	// WHERE repeats. The last is NULL for a task with no terminal event
	// (written into its state by hand).
	sqlTaskEnds = `SELECT task_id, min(seq), max(seq) FILTER (WHERE kind <> 'task.created') FROM events
		WHERE task_id = ANY($1::text[]) AND kind IN ('task.created','task.done','task.failed','task.cancelled')
		GROUP BY task_id`
	// sqlDepEnd records how the deleted dependencies ended on the edges
	// of the tasks that wait on them (for TaskDeadDependency).
	sqlDepEnd = `UPDATE task_deps SET dep_end = $1 WHERE dep_id = ANY($2::text[])`
	// sqlSweepEvents deletes the events of tasks no longer stored among
	// the seqs $1 to $2 (events of no task, a queue's, stay).
	sqlSweepEvents = `DELETE FROM events e WHERE e.seq BETWEEN $1 AND $2 AND e.task_id IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id)`
	// sqlLockTasks takes the advisory locks named $1 || id for each id of
	// $2, in the array's order (the subquery's, which the aggregate
	// reads in).
	sqlLockTasks = `SELECT count(pg_advisory_xact_lock(hashtextextended($1 || u.id, 0)))
		FROM (SELECT id FROM unnest($2::text[]) WITH ORDINALITY AS a(id, n) ORDER BY n) u`
)

func (r *reads) TaskExpiredCount(ctx context.Context, state, before string) (int, error) {
	var n int
	err := r.q.QueryRow(r.cx(ctx), sqlExpiredCount, state, before).Scan(&n)
	return n, err
}

// TaskExpiredEach reads a page of ids, then calls fn with each, then
// reads the next page after the last id: no rows are open while fn runs,
// and memory holds one page however many tasks expired.
func (r *reads) TaskExpiredEach(ctx context.Context, state, before string, fn func(id string) error) error {
	after := ""
	for {
		ids, err := queryStrings(r.cx(ctx), r.q, sqlExpiredPage, state, before, after, expiredPage)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := fn(id); err != nil {
				return err
			}
		}
		if len(ids) < expiredPage {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// TaskExpiredList, in a transaction, locks the tasks it returns and skips
// those another transaction holds: two cleanups at once delete different
// batches, and a task being retried is not waited for (it is no longer
// expired once its retry commits).
func (r *reads) TaskExpiredList(ctx context.Context, state, before string, limit int) ([]string, error) {
	q := sqlExpiredList
	if r.tx != nil {
		q += ` FOR UPDATE SKIP LOCKED`
	}
	return queryStrings(r.cx(ctx), r.q, q, state, before, limit)
}

func (r *reads) RunIDsOfTasks(ctx context.Context, taskIDs []string) ([]string, error) {
	if len(taskIDs) == 0 {
		return nil, nil
	}
	ids, err := queryStrings(r.cx(ctx), r.q, `SELECT id FROM runs WHERE task_id = ANY($1::text[])`, taskIDs)
	if len(ids) == 0 {
		return nil, err
	}
	return ids, err
}

func (r *reads) RunStored(ctx context.Context, ids []string) ([]string, error) {
	var out []string
	for len(ids) > 0 {
		n := min(len(ids), runStoredBatch)
		found, err := queryStrings(r.cx(ctx), r.q, `SELECT id FROM runs WHERE id = ANY($1::text[])`, ids[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
		ids = ids[n:]
	}
	return out, nil
}

// TaskDelete deletes the tasks first (task rows come first in the lock
// order), then takes the task lock of each deleted one before recording
// dep_end on the edges of its dependents: an enqueue that reads such a
// dependency under its lock (TaskDeadDependency, TaskDepsNotDone) either
// committed its edge before, and the update sees the edge, or reads
// after this commits, and finds the dependency gone.
func (tx *Tx) TaskDelete(ctx context.Context, state string, ids []string) ([]string, []store.EventSpan, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	deleted, err := queryStrings(tx.ctx, tx.ptx, sqlDeleteTasks, state, ids)
	if err != nil || len(deleted) == 0 {
		return nil, nil, err
	}
	slices.Sort(deleted)
	if err := tx.lockTasks(deleted); err != nil {
		return nil, nil, err
	}
	spans, err := tx.eventSpans(ctx, deleted)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.ptx.Exec(tx.ctx, sqlDepEnd, state, deleted); err != nil {
		return nil, nil, err
	}
	return deleted, spans, nil
}

// lockTasks takes the task locks (see lockTask) of ids, sorting them, that this
// transaction does not hold yet, in one statement in that order: the
// order every holder of several task locks takes them in. The locks'
// names are lock's.
func (tx *Tx) lockTasks(ids []string) error {
	var todo []string
	for _, id := range ids {
		if _, ok := tx.keys["task:"+id]; !ok {
			todo = append(todo, id)
		}
	}
	slices.Sort(todo)
	todo = slices.Compact(todo)
	switch len(todo) {
	case 0:
		return nil
	case 1:
		return tx.lockTask(tx.ctx, todo[0])
	}
	if _, err := tx.ptx.Exec(tx.ctx, sqlLockTasks, "cq:"+tx.db.Schema+":task:", todo); err != nil {
		return err
	}
	if tx.keys == nil {
		tx.keys = map[string]int{}
	}
	for _, id := range todo {
		tx.keys["task:"+id] = len(tx.savepoints)
	}
	return nil
}

// eventSpans reads the event spans of the tasks ids (sorted): from the
// log, and from this transaction's events not yet written, numbered as
// EventLastSeq numbers them.
func (tx *Tx) eventSpans(ctx context.Context, ids []string) ([]store.EventSpan, error) {
	rows, err := tx.ptx.Query(tx.ctx, sqlTaskEnds, ids)
	if err != nil {
		return nil, err
	}
	spans := map[string]store.EventSpan{}
	var id string
	var first int64
	var end *int64
	for rows.Next() {
		if err := rows.Scan(&id, &first, &end); err != nil {
			rows.Close()
			return nil, err
		}
		sp := store.EventSpan{First: first}
		if end != nil {
			sp.End = *end
		}
		spans[id] = sp
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	base := int64(-1)
	for i, e := range tx.events {
		terminal := e.Kind == "task.done" || e.Kind == "task.failed" || e.Kind == "task.cancelled"
		if e.Kind != "task.created" && !terminal {
			continue
		}
		if _, found := slices.BinarySearch(ids, e.TaskID); !found {
			continue
		}
		if base < 0 {
			if base, err = tx.lastSeq(ctx); err != nil {
				return nil, err
			}
		}
		seq := base + 1 + int64(i)
		sp, ok := spans[e.TaskID]
		if !ok || seq < sp.First {
			sp.First = seq
		}
		if terminal {
			sp.End = max(sp.End, seq)
		}
		spans[e.TaskID] = sp
	}
	out := make([]store.EventSpan, 0, len(spans))
	for _, sp := range spans {
		out = append(out, sp)
	}
	return out, nil
}

func (tx *Tx) EventSweep(ctx context.Context, lo, hi int64) (int, error) {
	tag, err := tx.ptx.Exec(tx.ctx, sqlSweepEvents, lo, hi)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
