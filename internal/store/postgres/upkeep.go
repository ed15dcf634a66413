package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The statements of store.UpkeepReader and store.UpkeepWriter: the
// maintenance pass's here, cleanup's and the event sweep's in
// upkeep_cleanup.go.
//
// The maintenance pass runs on every worker and in cq heartbeat, on many
// hosts at once. Its reads find candidates; what it does with each is a
// compare-and-set of its own (the domain's), so two passes at once do the
// work once. TaskBlockedReady locks what it returns in a transaction (see
// there): a promotion acts on more than the task's state.

func (r *reads) QueueList(ctx context.Context) ([]*store.Queue, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+queueCols+` FROM queues ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Queue, error) { return scanQueue(row) })
}

// sqlRunsStartLate reads runs_live (state = 'queued' implies its
// condition): a run claimed on the boot given is judged by that boot's
// clock, any other by its wall-clock creation.
const sqlRunsStartLate = `SELECT id FROM runs WHERE state = 'queued' AND queue = $1 AND
	(CASE WHEN boot_id = $2 AND claimed_ns IS NOT NULL THEN claimed_ns < $3 ELSE created_at < $4 END) LIMIT 500`

func (r *reads) RunsStartLate(ctx context.Context, queue string, before store.LeaseClock) ([]string, error) {
	return queryStrings(r.cx(ctx), r.q, sqlRunsStartLate, queue, nullable(before.BootID), before.BootNS, before.Wall)
}

// The dependency safety nets read a window of the dependency edges (the
// primary key of task_deps, by dependent id) and look both tasks of an
// edge up by id.
const (
	// sqlDepsWindow reads the next window of edges after a dependent id.
	sqlDepsWindow = `SELECT max(task_id), count(*) FROM
		(SELECT task_id FROM task_deps WHERE task_id > $1 ORDER BY task_id LIMIT $2) w`
	// sqlHealDepCounts zeroes the stale dependency count of a blocked
	// task whose stored dependencies are all done, among the tasks of one
	// window of the edges. A task another transaction changes meanwhile
	// is checked again on its new row (deps_left counted down to 0 by
	// the dependency's end, or no longer blocked): then left alone.
	sqlHealDepCounts = `UPDATE tasks t SET deps_left = 0
		WHERE t.id IN (SELECT d.task_id FROM task_deps d WHERE d.task_id > $1 AND d.task_id <= $2)
		AND t.state = 'blocked' AND t.deps_left > 0
		AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dep ON dep.id = d.dep_id
			WHERE d.task_id = t.id AND dep.state <> 'done')`
	// sqlOrphans finds tasks still waiting on a stored dependency that
	// ended failed or cancelled, among one window of the edges.
	sqlOrphans = `SELECT d.task_id, dep.id, dep.state FROM task_deps d
		JOIN tasks dep ON dep.id = d.dep_id JOIN tasks t ON t.id = d.task_id
		WHERE d.task_id > $1 AND d.task_id <= $2 AND dep.state IN ('failed','cancelled')
		AND t.state IN ('inbox','todo','blocked') LIMIT 1000`
)

func (r *reads) TaskDepsWindow(ctx context.Context, after string, limit int) (string, int, error) {
	var last *string
	var n int
	err := r.q.QueryRow(r.cx(ctx), sqlDepsWindow, after, limit).Scan(&last, &n)
	return str(last), n, err
}

func (tx *Tx) TaskDepCountsHeal(ctx context.Context, lo, hi string) error {
	_, err := tx.ptx.Exec(tx.ctx, sqlHealDepCounts, lo, hi)
	return err
}

func (r *reads) TaskOrphans(ctx context.Context, lo, hi string) ([]store.TaskOrphan, error) {
	rows, err := r.q.Query(r.cx(ctx), sqlOrphans, lo, hi)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TaskOrphan, error) {
		var o store.TaskOrphan
		err := row.Scan(&o.ID, &o.Dep, &o.DepState)
		return o, err
	})
}

// sqlBlockedReady reads the blocked tasks nothing blocks any more.
const sqlBlockedReady = `SELECT ` + taskCols + ` FROM tasks
	WHERE state = 'blocked' AND NOT hold AND deps_left = 0 AND (not_before IS NULL OR not_before <= $1) LIMIT 1000`

// TaskBlockedReady, in a transaction, locks the rows it returns, skipping
// those another transaction holds (the next pass comes back for them): a
// task is promoted on what is read here, its hold and its count included,
// which no other transaction can then change before this one commits. A
// row changed since the statement began is checked again, as it is now.
func (r *reads) TaskBlockedReady(ctx context.Context, at string) ([]*store.Task, error) {
	q := sqlBlockedReady
	if r.tx != nil {
		q += ` FOR NO KEY UPDATE SKIP LOCKED`
	}
	rows, err := r.q.Query(r.cx(ctx), q, at)
	return scanTasks(rows, err)
}

func (r *reads) TaskWaitingUnwarned(ctx context.Context, queue, before string, limit int) ([]string, error) {
	return queryStrings(r.cx(ctx), r.q, `SELECT id FROM tasks WHERE state = 'todo' AND queue = $1 AND NOT warned AND todo_at < $2 LIMIT $3`,
		queue, before, limit)
}

func (tx *Tx) TaskWarnedSet(ctx context.Context, id string) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE tasks SET warned = true WHERE id = $1 AND state = 'todo' AND NOT warned`, id)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func (tx *Tx) SystemStateSet(ctx context.Context, key, value, at string) error {
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO system_state (key, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, clean(value), at)
	return err
}

func (tx *Tx) SystemStateDelete(ctx context.Context, key string) error {
	_, err := tx.ptx.Exec(tx.ctx, `DELETE FROM system_state WHERE key = $1`, key)
	return err
}

// RunEndedList reads runs_ended in its order, from just after the run
// (after, afterID).
func (r *reads) RunEndedList(ctx context.Context, after, afterID, before string, limit int) ([]store.RunEnded, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT task_id, id, ended_at FROM runs
		WHERE ended_at IS NOT NULL AND (ended_at, id) > ($1, $2) AND ended_at < $3
		ORDER BY ended_at, id LIMIT $4`, after, afterID, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.RunEnded, error) {
		var e store.RunEnded
		err := row.Scan(&e.TaskID, &e.RunID, &e.EndedAt)
		return e, err
	})
}

// FreePagesCount is 0: PostgreSQL keeps no free pages for cq to give back.
// Space freed by deletions is reclaimed by (auto)vacuum, which the server
// runs on its own.
func (r *reads) FreePagesCount(context.Context) (int, error) { return 0, nil }

// FreePagesRelease does nothing: see FreePagesCount.
func (tx *Tx) FreePagesRelease(context.Context, int) error { return nil }
