package sqlite

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/cq-dev/cq/internal/store"
)

// The statements of store.UpkeepReader and store.UpkeepWriter: the
// maintenance pass's here, cleanup's and the event sweep's in
// upkeep_cleanup.go.

// sqlRunsStartLate reads runs_live (its condition repeated, runsLive).
const sqlRunsStartLate = `SELECT id FROM runs WHERE ` + runsLive + ` AND state = 'queued' AND queue = ? AND
	(CASE WHEN boot_id = ? AND claimed_ns IS NOT NULL THEN claimed_ns < ? ELSE created_at < ? END) LIMIT 500`

func (r reads) RunsStartLate(ctx context.Context, queue string, before store.LeaseClock) ([]string, error) {
	return queryStrings(ctx, r.q, sqlRunsStartLate, queue, nullable(before.BootID), before.BootNS, before.Wall)
}

func (r reads) QueueList(ctx context.Context) ([]*store.Queue, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+QueueCols+` FROM queues ORDER BY name`)
	return scanAll(rows, err, ScanQueue)
}

func (t *Tx) SystemStateSet(ctx context.Context, key, value, at string) error {
	_, err := t.ExecContext(ctx, `INSERT INTO system_state (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, at)
	return err
}

func (t *Tx) SystemStateDelete(ctx context.Context, key string) error {
	_, err := t.ExecContext(ctx, `DELETE FROM system_state WHERE key = ?`, key)
	return err
}

// The dependency safety nets read a window of the dependency edges (the
// primary key of task_deps, by dependent id) and look both tasks of an
// edge up by id. +state keeps tasks_state out of their plans: through it
// the orphan scan read every failed and cancelled task of the store (3 s
// for 1.5M, every heartbeat pass, under the write lock).
const (
	// sqlDepsWindow reads the next window of edges after a dependent id.
	sqlDepsWindow = `SELECT MAX(task_id), COUNT(*) FROM
			(SELECT task_id FROM task_deps WHERE task_id > ? ORDER BY task_id LIMIT ?)`
	// sqlHealDepCounts zeroes the stale dependency count of a blocked
	// task whose dependencies are all done, among the tasks of one window
	// of the dependency edges.
	sqlHealDepCounts = `UPDATE tasks SET deps_left = 0
	WHERE +state = 'blocked' AND deps_left > 0 AND id IN (SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.task_id > ? AND d.task_id <= ? AND +t.state = 'blocked' AND t.deps_left > 0)
	AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dep ON dep.id = d.dep_id
		WHERE d.task_id = tasks.id AND dep.state != 'done')`
	// sqlCancelOrphans finds tasks still waiting on a dependency that
	// ended failed or cancelled, among one window of the dependency edges.
	sqlCancelOrphans = `SELECT d.task_id, dep.id, dep.state FROM task_deps d
	JOIN tasks dep ON dep.id = d.dep_id JOIN tasks t ON t.id = d.task_id
	WHERE d.task_id > ? AND d.task_id <= ? AND +dep.state IN ('failed','cancelled') AND +t.state IN ('inbox','todo','blocked') LIMIT 1000`
)

func (r reads) TaskDepsWindow(ctx context.Context, after string, limit int) (string, int, error) {
	var last sql.NullString
	var n int
	err := r.q.QueryRowContext(ctx, sqlDepsWindow, after, limit).Scan(&last, &n)
	return last.String, n, err
}

func (t *Tx) TaskDepCountsHeal(ctx context.Context, lo, hi string) error {
	_, err := t.ExecContext(ctx, sqlHealDepCounts, lo, hi)
	return err
}

func (r reads) TaskOrphans(ctx context.Context, lo, hi string) ([]store.TaskOrphan, error) {
	rows, err := r.q.QueryContext(ctx, sqlCancelOrphans, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TaskOrphan
	for rows.Next() {
		var o store.TaskOrphan
		if err := rows.Scan(&o.ID, &o.Dep, &o.DepState); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func (r reads) TaskBlockedReady(ctx context.Context, at string) ([]*store.Task, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+TaskCols+` FROM tasks
			WHERE state = 'blocked' AND hold = 0 AND deps_left = 0 AND (not_before IS NULL OR not_before <= ?) LIMIT 1000`, at)
	return scanAll(rows, err, ScanTask)
}

func (r reads) TaskWaitingUnwarned(ctx context.Context, queue, before string, limit int) ([]string, error) {
	return queryStrings(ctx, r.q, `SELECT id FROM tasks WHERE state = 'todo' AND queue = ? AND warned = 0 AND todo_at < ? LIMIT ?`,
		queue, before, limit)
}

func (t *Tx) TaskWarnedSet(ctx context.Context, id string) (bool, error) {
	res, err := t.ExecContext(ctx, `UPDATE tasks SET warned = 1 WHERE id = ? AND state = 'todo' AND warned = 0`, id)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func (r reads) RunEndedList(ctx context.Context, after, afterID, before string, limit int) ([]store.RunEnded, error) {
	// Read from the runs_ended index, in its order.
	rows, err := r.q.QueryContext(ctx, `SELECT task_id, id, ended_at FROM runs
		WHERE ended_at IS NOT NULL AND ended_at >= ? AND ended_at < ? AND (ended_at > ? OR id > ?)
		ORDER BY ended_at, id LIMIT ?`, after, before, after, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.RunEnded
	for rows.Next() {
		var e store.RunEnded
		if err := rows.Scan(&e.TaskID, &e.RunID, &e.EndedAt); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (r reads) FreePagesCount(ctx context.Context) (int, error) {
	var n int
	err := r.q.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&n)
	return n, err
}

func (t *Tx) FreePagesRelease(ctx context.Context, pages int) error {
	// The pragma returns a row per page it frees: they are read to the
	// end, which is what runs it.
	rows, err := t.QueryContext(ctx, `PRAGMA incremental_vacuum(`+strconv.Itoa(pages)+`)`)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}
