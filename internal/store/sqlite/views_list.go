package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// The task listings and the reads a worker polls with.

// byStatePage reports whether f is a page of tasks in given states that
// taskPageByState reads.
func byStatePage(f store.TaskFilter) bool {
	return f.Limit > 0 && len(f.States) > 0 && f.Key == ""
}

func (r reads) TaskList(ctx context.Context, f store.TaskFilter, fn func(*store.Task) error) error {
	if byStatePage(f) {
		ts, err := r.taskPageByState(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	}
	q, args := listQuery(TaskCols, f)
	rows, err := r.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		t, err := ScanTask(rows)
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (r reads) TaskListIDs(ctx context.Context, f store.TaskFilter, fn func(string) error) error {
	if byStatePage(f) {
		ts, err := r.taskPageByState(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := fn(t.ID); err != nil {
				return err
			}
		}
		return nil
	}
	q, args := listQuery("id", f)
	rows, err := r.q.QueryContext(ctx, q, args...)
	return eachString(rows, err, fn)
}

func (r reads) TaskCount(ctx context.Context, f store.TaskFilter) (int, error) {
	q, args := listWhere(`SELECT COUNT(*) FROM tasks`, f)
	var n int
	err := r.q.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// listQuery is the SELECT of cols for a listing's filter, newest first.
func listQuery(cols string, f store.TaskFilter) (string, []any) {
	q, args := listWhere(`SELECT `+cols+` FROM tasks`, f)
	// Insertion order is creation order: newest first without an index of
	// its own.
	q += ` ORDER BY rowid DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return q, args
}

// listWhere adds to q the WHERE clause of a listing's filter.
func listWhere(q string, f store.TaskFilter) (string, []any) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, `state IN (`+strings.TrimSuffix(strings.Repeat("?,", len(f.States)), ",")+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.Queue != "" {
		where = append(where, `queue = ?`)
		args = append(args, f.Queue)
	}
	if f.Key != "" {
		where = append(where, `key = ?`)
		args = append(args, f.Key)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return q, args
}

// taskPageByState is a page of tasks in given states. A state may hold
// millions of tasks: read through tasks_state (state, queue), the newest
// first of them all would sort every one (2.4 s for 1.5M). So each state
// and queue gives its newest Limit rowids, in index order, and the page
// is the newest Limit of those.
func (r reads) taskPageByState(ctx context.Context, f store.TaskFilter) ([]*store.Task, error) {
	queues := []string{f.Queue}
	if f.Queue == "" {
		var err error
		if queues, err = queryStrings(ctx, r.q, `SELECT name FROM queues`); err != nil {
			return nil, err
		}
	}
	var rowids []int64
	for _, st := range f.States {
		for _, q := range queues {
			rows, err := r.q.QueryContext(ctx, `SELECT rowid FROM tasks WHERE state = ? AND queue = ? ORDER BY rowid DESC LIMIT ?`, st, q, f.Limit)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return nil, err
				}
				rowids = append(rowids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(rowids)
	rowids = slices.Compact(rowids) // a state given twice
	slices.Reverse(rowids)
	rowids = rowids[:min(len(rowids), f.Limit)]
	if len(rowids) == 0 {
		return nil, nil
	}
	args := make([]any, len(rowids))
	for i, id := range rowids {
		args[i] = id
	}
	rows, err := r.q.QueryContext(ctx, `SELECT `+TaskCols+` FROM tasks WHERE rowid IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`) ORDER BY rowid DESC`, args...)
	return scanAll(rows, err, ScanTask)
}

// taskDepsByID is how many tasks TaskDependencies looks up by id; for
// more it reads every dependency.
const taskDepsByID = 500

func (r reads) TaskDependencies(ctx context.Context, ids []string, fn func(taskID, depID string)) error {
	if len(ids) == 0 {
		return nil
	}
	// A page of tasks asks by id; a listing of everything reads the whole
	// (small) dependency table instead of building a huge IN list.
	q, args := `SELECT task_id, dep_id FROM task_deps ORDER BY task_id, pos`, []any(nil)
	if len(ids) <= taskDepsByID {
		args = make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		q = `SELECT task_id, dep_id FROM task_deps WHERE task_id IN (` +
			strings.TrimSuffix(strings.Repeat("?,", len(args)), ",") + `) ORDER BY task_id, pos`
	}
	rows, err := r.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var tid, dep string
	for rows.Next() {
		if err := rows.Scan(&tid, &dep); err != nil {
			return err
		}
		fn(tid, dep)
	}
	return rows.Err()
}

// taskStatesChunk bounds the ids of one TaskStates query.
const taskStatesChunk = 500

func (r reads) TaskStates(ctx context.Context, ids []string, fn func(id, state, reason string)) error {
	for len(ids) > 0 {
		n := min(len(ids), taskStatesChunk)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		ids = ids[n:]
		rows, err := r.q.QueryContext(ctx, `SELECT id, state, reason FROM tasks WHERE id IN (?`+strings.Repeat(`,?`, n-1)+`)`, args...)
		if err != nil {
			return err
		}
		var id, state string
		var reason sql.NullString
		for rows.Next() {
			if err := rows.Scan(&id, &state, &reason); err != nil {
				rows.Close()
				return err
			}
			fn(id, state, reason.String)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r reads) TaskDue(ctx context.Context, at string) ([]*store.Task, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+TaskCols+` FROM tasks
			WHERE state = 'blocked' AND not_before IS NOT NULL AND not_before <= ? AND hold = 0 AND deps_left = 0 LIMIT 1000`, at)
	return scanAll(rows, err, ScanTask)
}

func (r reads) TaskRunnableExists(ctx context.Context) (bool, error) {
	var one int
	err := r.q.QueryRowContext(ctx, `SELECT 1 FROM tasks INDEXED BY tasks_claim WHERE state = 'todo' AND lane_head = 1 LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (r reads) TaskNextDue(ctx context.Context) (string, error) {
	var nb sql.NullString
	err := r.q.QueryRowContext(ctx, `SELECT MIN(not_before) FROM tasks WHERE state = 'blocked' AND not_before IS NOT NULL`).Scan(&nb)
	return nb.String, err
}

func (r reads) TaskStateCounts(ctx context.Context, fn func(state string, n int)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT state, COUNT(*) FROM tasks GROUP BY state`)
	return scanCounts(rows, err, fn)
}

func (r reads) TaskRetryBlockedCount(ctx context.Context) (int, error) {
	var n int
	err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'blocked' AND blocked_reason = 'retry'`).Scan(&n)
	return n, err
}

func (r reads) TaskOldestTodo(ctx context.Context) (id, queue, since string, err error) {
	err = r.q.QueryRowContext(ctx, `SELECT id, queue, todo_at FROM tasks WHERE state = 'todo' AND todo_at IS NOT NULL
		ORDER BY todo_at LIMIT 1`).Scan(&id, &queue, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", "", nil
	}
	return id, queue, since, err
}

func (r reads) TaskWaitWarnedCount(ctx context.Context) (int, error) {
	var n int
	err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 'todo' AND warned = 1`).Scan(&n)
	return n, err
}
