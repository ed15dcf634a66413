package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The task listings and the reads a worker polls with.

// listPage bounds the tasks a listing holds in memory at a time.
const listPage = 500

// listByStateMax is the largest limit a page of tasks by state reads
// through tasks_state (see listByState).
const listByStateMax = 10000

// listWhere is the WHERE clause of a listing's filter (or ""), with its
// arguments, numbered from $1.
func listWhere(f store.TaskFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.States) > 0 {
		where = append(where, `state = ANY(`+arg(f.States)+`::text[])`)
	}
	if f.Queue != "" {
		where = append(where, `queue = `+arg(f.Queue))
	}
	if f.Key != "" {
		where = append(where, `key = `+arg(f.Key))
	}
	if len(where) == 0 {
		return "", nil
	}
	return ` WHERE ` + strings.Join(where, ` AND `), args
}

// listByState reports whether f is a page of tasks in given states that
// listByStateSQL reads.
func listByState(f store.TaskFilter) bool {
	return f.Limit > 0 && f.Limit <= listByStateMax && len(f.States) > 0 && f.Key == ""
}

// listByStateSQL selects cols of a page of tasks by state, newest first. A
// state may hold millions of tasks, and tasks_state (state, queue, pos)
// gives no order by pos across queues: each state and queue gives its
// newest $2 positions from the index, and the page is the newest $2 of
// those (a state given twice counts once). $1 is the states, $2 the limit, $3 the queue ("" for all).
func listByStateSQL(cols string) string {
	return `SELECT ` + cols + ` FROM tasks WHERE pos IN (
		SELECT x.pos FROM queues q CROSS JOIN (SELECT DISTINCT unnest($1::text[])) s(state)
			CROSS JOIN LATERAL (SELECT t.pos FROM tasks t WHERE t.state = s.state AND t.queue = q.name
				ORDER BY t.pos DESC LIMIT $2) x
		WHERE $3 = '' OR q.name = $3
		ORDER BY x.pos DESC LIMIT $2)
	ORDER BY pos DESC`
}

// listEach reads the tasks f selects, newest first, a page at a time by
// position, as rows of cols followed by pos, and calls each with every
// row read (after the page's rows are closed).
func listEach[T any](ctx context.Context, r *reads, f store.TaskFilter, cols string,
	scan func(pgx.Row) (T, error), each func(T) error) error {
	if listByState(f) {
		rows, err := r.q.Query(r.cx(ctx), listByStateSQL(cols), f.States, f.Limit, f.Queue)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
		if err != nil {
			return err
		}
		for _, v := range vs {
			if err := each(v); err != nil {
				return err
			}
		}
		return nil
	}
	where, args := listWhere(f)
	if where == "" {
		where = ` WHERE true`
	}
	q := `SELECT ` + cols + `, pos FROM tasks` + where + ` AND pos < $` + strconv.Itoa(len(args)+1) +
		` ORDER BY pos DESC LIMIT $` + strconv.Itoa(len(args)+2)
	before := int64(1<<63 - 1)
	left := f.Limit
	for {
		n := listPage
		if f.Limit > 0 {
			n = min(n, left)
		}
		if n <= 0 {
			return nil
		}
		rows, err := r.q.Query(r.cx(ctx), q, append(args, before, n)...)
		if err != nil {
			return err
		}
		var vs []T
		for rows.Next() {
			v, err := scan(posRow{rows, &before})
			if err != nil {
				rows.Close()
				return err
			}
			vs = append(vs, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, v := range vs {
			if err := each(v); err != nil {
				return err
			}
		}
		if len(vs) < n {
			return nil
		}
		left -= len(vs)
	}
}

// posRow is a row whose last column, a position, goes to pos.
type posRow struct {
	pgx.Row
	pos *int64
}

func (p posRow) Scan(dest ...any) error { return p.Row.Scan(append(dest, p.pos)...) }

func (r *reads) TaskList(ctx context.Context, f store.TaskFilter, fn func(*store.Task) error) error {
	return listEach(ctx, r, f, taskCols, scanTask, fn)
}

func (r *reads) TaskListIDs(ctx context.Context, f store.TaskFilter, fn func(id string) error) error {
	return listEach(ctx, r, f, "id", func(row pgx.Row) (string, error) {
		var id string
		err := row.Scan(&id)
		return id, err
	}, fn)
}

func (r *reads) TaskCount(ctx context.Context, f store.TaskFilter) (int, error) {
	where, args := listWhere(f)
	var n int
	err := r.q.QueryRow(r.cx(ctx), `SELECT count(*) FROM tasks`+where, args...).Scan(&n)
	return n, err
}

// viewIDsChunk bounds the ids of one statement of TaskDependencies and
// TaskStates.
const viewIDsChunk = 5000

func (r *reads) TaskDependencies(ctx context.Context, ids []string, fn func(taskID, depID string)) error {
	type dep struct{ task, dep string }
	for len(ids) > 0 {
		n := min(len(ids), viewIDsChunk)
		rows, err := r.q.Query(r.cx(ctx), `SELECT task_id, dep_id FROM task_deps WHERE task_id = ANY($1::text[])
			ORDER BY task_id, pos`, ids[:n])
		if err != nil {
			return err
		}
		ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dep, error) {
			var d dep
			err := row.Scan(&d.task, &d.dep)
			return d, err
		})
		if err != nil {
			return err
		}
		for _, d := range ds {
			fn(d.task, d.dep)
		}
		ids = ids[n:]
	}
	return nil
}

func (r *reads) TaskStates(ctx context.Context, ids []string, fn func(id, state, reason string)) error {
	type st struct{ id, state, reason string }
	for len(ids) > 0 {
		n := min(len(ids), viewIDsChunk)
		rows, err := r.q.Query(r.cx(ctx), `SELECT id, state, COALESCE(reason,'') FROM tasks WHERE id = ANY($1::text[])`, ids[:n])
		if err != nil {
			return err
		}
		ss, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (st, error) {
			var s st
			err := row.Scan(&s.id, &s.state, &s.reason)
			return s, err
		})
		if err != nil {
			return err
		}
		for _, s := range ss {
			fn(s.id, s.state, s.reason)
		}
		ids = ids[n:]
	}
	return nil
}

func (r *reads) TaskDue(ctx context.Context, at string) ([]*store.Task, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+taskCols+` FROM tasks
		WHERE state = 'blocked' AND not_before IS NOT NULL AND not_before <= $1 AND NOT hold AND deps_left = 0 LIMIT 1000`, at)
	return scanTasks(rows, err)
}

// TaskRunnableExists repeats tasks_claim's condition, so that it reads
// that index alone.
func (r *reads) TaskRunnableExists(ctx context.Context) (bool, error) {
	var ok bool
	err := r.q.QueryRow(r.cx(ctx), `SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'todo' AND lane_head)`).Scan(&ok)
	return ok, err
}

func (r *reads) TaskNextDue(ctx context.Context) (string, error) {
	var nb *string
	err := r.q.QueryRow(r.cx(ctx), `SELECT min(not_before) FROM tasks WHERE state = 'blocked' AND not_before IS NOT NULL`).Scan(&nb)
	return str(nb), err
}

func (r *reads) TaskStateCounts(ctx context.Context, fn func(state string, n int)) error {
	return r.viewCounts(ctx, fn, `SELECT state, count(*) FROM tasks GROUP BY state`)
}

func (r *reads) TaskRetryBlockedCount(ctx context.Context) (int, error) {
	var n int
	err := r.q.QueryRow(r.cx(ctx), `SELECT count(*) FROM tasks WHERE state = 'blocked' AND blocked_reason = 'retry'`).Scan(&n)
	return n, err
}

func (r *reads) TaskOldestTodo(ctx context.Context) (id, queue, since string, err error) {
	err = r.q.QueryRow(r.cx(ctx), `SELECT id, queue, todo_at FROM tasks WHERE state = 'todo' AND todo_at IS NOT NULL
		ORDER BY todo_at LIMIT 1`).Scan(&id, &queue, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "", nil
	}
	return id, queue, since, err
}

func (r *reads) TaskWaitWarnedCount(ctx context.Context) (int, error) {
	var n int
	err := r.q.QueryRow(r.cx(ctx), `SELECT count(*) FROM tasks WHERE state = 'todo' AND warned`).Scan(&n)
	return n, err
}

func (r *reads) TaskLastPos(ctx context.Context) (int64, error) {
	var last int64
	err := r.q.QueryRow(r.cx(ctx), `SELECT COALESCE(max(pos), 0) FROM tasks`).Scan(&last)
	return last, err
}

func (r *reads) TaskClearable(ctx context.Context, s store.TaskClearScan) ([]string, int64, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT pos, id FROM tasks WHERE pos > $1 AND pos <= $2
			AND queue = $3 AND state IN ('inbox','todo','blocked') AND created_at <= $4 ORDER BY pos LIMIT $5`,
		s.After, s.Upto, s.Queue, s.CreatedBy, s.Limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var ids []string
	var last int64
	for rows.Next() {
		var id string
		if err := rows.Scan(&last, &id); err != nil {
			return nil, 0, err
		}
		ids = append(ids, id)
	}
	return ids, last, rows.Err()
}
