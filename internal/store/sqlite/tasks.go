package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// TaskCols are the columns ScanTask reads, in its order.
const TaskCols = `id, state, queue, COALESCE(key,''), priority, COALESCE(seq,0), lane_head, spec, is_unique, hold,
	deps_left, COALESCE(not_before,''), COALESCE(not_before_why,''), COALESCE(blocked_reason,''), COALESCE(reason,''),
	attempts, fails_other, fails_transient, fails_timeout, COALESCE(todo_at,''), created_at, updated_at, COALESCE(finished_at,'')`

// ScanTask reads a row of TaskCols.
func ScanTask(sc interface{ Scan(...any) error }) (*store.Task, error) {
	var t store.Task
	err := sc.Scan(&t.ID, &t.State, &t.Queue, &t.Key, &t.Priority, &t.Seq, &t.LaneHead, &t.Spec, &t.Unique, &t.Hold,
		&t.DepsLeft, &t.NotBefore, &t.NotBeforeWhy, &t.BlockedReason, &t.Reason,
		&t.Attempts, &t.FailsOther, &t.FailsTransient, &t.FailsTimeout, &t.TodoAt, &t.CreatedAt, &t.UpdatedAt, &t.FinishedAt)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// laneStates and keyLiveStates are the conditions of the partial indexes
// tasks_lane and tasks_key_live, word for word (migrations/0005_state_checks_as_ors.sql):
// a query that repeats one may read its index.
const (
	laneStates    = `(state = 'todo' OR state = 'blocked' OR state = 'doing')`
	keyLiveStates = `(state = 'inbox' OR state = 'todo' OR state = 'blocked' OR state = 'doing')`
)

// Statements whose bound id or key is written CAST(? AS TEXT), the same
// value for the text bound to it. With a bare ? SQLite's planner marks
// the parameter as one whose value may change the plan, and the driver
// clears the bindings before each use of a cached statement, which
// expires such a statement: it was prepared again every time it ran, at
// many times what running it costs (docs/performance.md).
const (
	sqlTaskGet     = `SELECT ` + TaskCols + ` FROM tasks WHERE id = ?`
	sqlKeyHolder   = `SELECT id, state FROM tasks WHERE key = ? AND id != ? AND ` + keyLiveStates + ` LIMIT 1`
	sqlLaneHeld    = `SELECT 1 FROM tasks WHERE key = CAST(? AS TEXT) AND ` + laneStates + ` AND id != ? LIMIT 1`
	sqlAdvanceLane = `UPDATE tasks SET lane_head = 1
		WHERE id = (SELECT id FROM tasks WHERE key = CAST(? AS TEXT) AND ` + laneStates + ` ORDER BY seq LIMIT 1)
		AND lane_head = 0`
	// sqlDeadDependency finds a dependency that ended failed or
	// cancelled, still stored or deleted since by cleanup (dep_end).
	sqlDeadDependency = `SELECT d.dep_id, COALESCE(t.state, d.dep_end) FROM task_deps d LEFT JOIN tasks t ON t.id = d.dep_id
		WHERE d.task_id = CAST(? AS TEXT) AND (t.state IN ('failed','cancelled') OR (t.id IS NULL AND d.dep_end IN ('failed','cancelled')))
		ORDER BY d.pos LIMIT 1`
	sqlWaitingDependents = `SELECT ` + TaskCols + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = CAST(? AS TEXT) AND t.state IN ('inbox','todo','blocked')`
	sqlReadyDependents = `SELECT ` + TaskCols + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = CAST(? AS TEXT) AND t.state = 'blocked' AND t.deps_left = 0`
)

func (r reads) TaskGet(ctx context.Context, id string) (*store.Task, error) {
	t, err := ScanTask(r.q.QueryRowContext(ctx, sqlTaskGet, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return t, err
}

func (r reads) TaskLaneHeld(ctx context.Context, key, exceptID string) (bool, error) {
	var one int
	err := r.q.QueryRowContext(ctx, sqlLaneHeld, key, exceptID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (r reads) TaskKeyHolder(ctx context.Context, key, exceptID string) (*store.KeyHolder, error) {
	var h store.KeyHolder
	err := r.q.QueryRowContext(ctx, sqlKeyHolder, key, exceptID).Scan(&h.ID, &h.State)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

func (r reads) TaskDeadDependency(ctx context.Context, id string) (string, string, error) {
	var dep, state string
	err := r.q.QueryRowContext(ctx, sqlDeadDependency, id).Scan(&dep, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	return dep, state, err
}

func (r reads) TaskDependentsWaiting(ctx context.Context, dep string) ([]*store.Task, error) {
	rows, err := r.q.QueryContext(ctx, sqlWaitingDependents, dep)
	return scanAll(rows, err, ScanTask)
}

func (t *Tx) TaskDependencyDone(ctx context.Context, dep string) ([]*store.Task, error) {
	// Most tasks have no dependents: one index probe settles it, where the
	// UPDATE below would build a temporary table for its IN list.
	var one int
	switch err := t.QueryRowContext(ctx, `SELECT 1 FROM task_deps WHERE dep_id = ? LIMIT 1`, dep).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	// +state: the dependents are found by id (see sqlDeleteTasks).
	if _, err := t.ExecContext(ctx, `UPDATE tasks SET deps_left = deps_left - 1
		WHERE id IN (SELECT task_id FROM task_deps WHERE dep_id = ?) AND deps_left > 0 AND +state IN ('inbox','blocked')`, dep); err != nil {
		return nil, err
	}
	rows, err := t.QueryContext(ctx, sqlReadyDependents, dep)
	return scanAll(rows, err, ScanTask)
}

func (t *Tx) TaskSetBlockedReason(ctx context.Context, id, reason string) error {
	_, err := t.ExecContext(ctx, `UPDATE tasks SET blocked_reason = ? WHERE id = ? AND state = 'blocked'`, reason, id)
	return err
}

func (t *Tx) TaskLaneAdvance(ctx context.Context, key string) error {
	_, err := t.ExecContext(ctx, sqlAdvanceLane, key)
	return err
}

// taskUpdateSQL holds the statement for each set of fields and failure
// class a TaskUpdate writes (taskUpdateText).
var taskUpdateSQL store.TaskUpdateStatements

func (t *Tx) TaskUpdate(ctx context.Context, u store.TaskUpdate) (bool, error) {
	q, err := taskUpdateSQL.For(u, taskUpdateText)
	if err != nil {
		return false, err
	}
	args := make([]any, 0, 14)
	args = append(args, u.To, u.At)
	for _, c := range taskUpdateCols {
		if u.Set&c.bit != 0 && c.args != nil {
			args = c.args(u, args)
		}
	}
	args = append(args, u.ID, u.From)
	res, err := t.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// taskUpdateCols are the fields a TaskUpdate may write, in the order of
// their placeholders: each bit's assignment, and the values it binds
// (none for a constant).
var taskUpdateCols = []struct {
	bit  store.TaskFields
	set  string
	args func(u store.TaskUpdate, args []any) []any
}{
	{store.SetSeq, "seq = ?", func(u store.TaskUpdate, a []any) []any { return append(a, u.Seq) }},
	{store.SetLaneHead, "lane_head = ?", func(u store.TaskUpdate, a []any) []any { return append(a, u.LaneHead) }},
	{store.SetHold, "hold = ?", func(u store.TaskUpdate, a []any) []any { return append(a, u.Hold) }},
	{store.SetBlockedReason, "blocked_reason = ?", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.BlockedReason)) }},
	{store.SetNotBefore, "not_before = ?, not_before_why = ?", func(u store.TaskUpdate, a []any) []any {
		return append(a, nullable(u.NotBefore), nullable(u.NotBeforeWhy))
	}},
	{store.SetTodoAt, "todo_at = ?", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.TodoAt)) }},
	{store.SetFinishedAt, "finished_at = ?", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.FinishedAt)) }},
	{store.SetReason, "reason = ?", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.Reason)) }},
	{store.ClearWarned, "warned = 0", nil},
	{store.ResetFails, "fails_other = 0, fails_transient = 0, fails_timeout = 0", nil},
}

// taskUpdateText is the UPDATE for the fields f and failure class fc
// (1-based; 0 none), its placeholders in TaskUpdate's order.
func taskUpdateText(f store.TaskFields, fc int) string {
	var b strings.Builder
	b.WriteString(`UPDATE tasks SET state = ?, updated_at = ?`)
	set := func(s string) { b.WriteString(", " + s) }
	for _, c := range taskUpdateCols {
		if f&c.bit != 0 {
			set(c.set)
		}
	}
	if fc > 0 {
		col := store.FailColumns[fc-1].Col
		set(col + " = " + col + " + 1")
	}
	b.WriteString(` WHERE id = ? AND state = ?`)
	return b.String()
}
