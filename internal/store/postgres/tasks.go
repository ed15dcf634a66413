package postgres

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// taskCols are the columns scanTask reads, in its order, each NULL read
// as cq's "" or 0.
const taskCols = `id, state, queue, COALESCE(key,''), priority, COALESCE(seq,0), lane_head, spec, is_unique, hold,
	deps_left, COALESCE(not_before,''), COALESCE(not_before_why,''), COALESCE(blocked_reason,''), COALESCE(reason,''),
	attempts, fails_other, fails_transient, fails_timeout, COALESCE(todo_at,''), created_at, updated_at, COALESCE(finished_at,'')`

// taskColsT is taskCols of the tasks row named t, for joins.
const taskColsT = `t.id, t.state, t.queue, COALESCE(t.key,''), t.priority, COALESCE(t.seq,0), t.lane_head, t.spec, t.is_unique,
	t.hold, t.deps_left, COALESCE(t.not_before,''), COALESCE(t.not_before_why,''), COALESCE(t.blocked_reason,''),
	COALESCE(t.reason,''), t.attempts, t.fails_other, t.fails_transient, t.fails_timeout, COALESCE(t.todo_at,''),
	t.created_at, t.updated_at, COALESCE(t.finished_at,'')`

// scanTask reads a row of taskCols.
func scanTask(sc pgx.Row) (*store.Task, error) {
	var t store.Task
	err := sc.Scan(&t.ID, &t.State, &t.Queue, &t.Key, &t.Priority, &t.Seq, &t.LaneHead, &t.Spec, &t.Unique, &t.Hold,
		&t.DepsLeft, &t.NotBefore, &t.NotBeforeWhy, &t.BlockedReason, &t.Reason,
		&t.Attempts, &t.FailsOther, &t.FailsTransient, &t.FailsTimeout, &t.TodoAt, &t.CreatedAt, &t.UpdatedAt, &t.FinishedAt)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// scanTasks reads every row of a query of taskCols; none is an empty
// list.
func scanTasks(rows pgx.Rows, err error) ([]*store.Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*store.Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// laneStates and keyLiveStates are the conditions of the partial indexes
// tasks_lane and tasks_key_live, so that a query repeating one may use its
// index.
const (
	laneStates    = `key IS NOT NULL AND state IN ('todo','blocked','doing')`
	keyLiveStates = `key IS NOT NULL AND state IN ('inbox','todo','blocked','doing')`
)

const (
	sqlTaskGet   = `SELECT ` + taskCols + ` FROM tasks WHERE id = $1`
	sqlKeyHolder = `SELECT id, state FROM tasks WHERE key = $1 AND ` + keyLiveStates + ` AND id <> $2 LIMIT 1`
	sqlLaneHeld  = `SELECT EXISTS (SELECT 1 FROM tasks WHERE key = $1 AND ` + laneStates + ` AND id <> $2)`
	// sqlLaneAdvance: the lane's first task by seq becomes its head,
	// unless it is already.
	sqlLaneAdvance = `UPDATE tasks SET lane_head = true
		WHERE id = (SELECT id FROM tasks WHERE key = $1 AND ` + laneStates + ` ORDER BY seq LIMIT 1) AND NOT lane_head`
	// sqlDeadDependency finds a dependency that ended failed or
	// cancelled, still stored or deleted since by cleanup (dep_end).
	sqlDeadDependency = `SELECT d.dep_id, COALESCE(t.state, d.dep_end) FROM task_deps d LEFT JOIN tasks t ON t.id = d.dep_id
		WHERE d.task_id = $1 AND (t.state IN ('failed','cancelled') OR (t.id IS NULL AND d.dep_end IN ('failed','cancelled')))
		ORDER BY d.pos LIMIT 1`
	sqlDependentsWaiting = `SELECT ` + taskColsT + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = $1 AND t.state IN ('inbox','todo','blocked') ORDER BY t.seq NULLS FIRST, t.id`
	// sqlDependencyDone counts dep off its waiting dependents and returns
	// the blocked ones at 0: those it brought there (the rows as updated)
	// and those that were there already (read from the statement's
	// snapshot, which the update leaves alone).
	sqlDependencyDone = `WITH u AS (
			UPDATE tasks t SET deps_left = t.deps_left - 1 FROM task_deps d
			WHERE d.dep_id = $1 AND t.id = d.task_id AND t.deps_left > 0 AND t.state IN ('inbox','blocked')
			RETURNING t.*)
		SELECT ` + taskColsT + ` FROM u t WHERE t.state = 'blocked' AND t.deps_left = 0
		UNION ALL
		SELECT ` + taskColsT + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = $1 AND t.state = 'blocked' AND t.deps_left = 0 AND t.id NOT IN (SELECT id FROM u)`
)

func (r *reads) TaskGet(ctx context.Context, id string) (*store.Task, error) {
	t, err := scanTask(r.q.QueryRow(r.cx(ctx), sqlTaskGet, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return t, err
}

// TaskLaneHeld reads the lane under the key's lock in a transaction:
// the transaction then orders its entry into the lane after every
// other writer of the key that went before it.
func (r *reads) TaskLaneHeld(ctx context.Context, key, exceptID string) (bool, error) {
	if r.tx != nil {
		if err := r.tx.lockKey(ctx, key); err != nil {
			return false, err
		}
	}
	var held bool
	err := r.q.QueryRow(r.cx(ctx), sqlLaneHeld, key, exceptID).Scan(&held)
	return held, err
}

// TaskKeyHolder reads under the key's lock in a transaction, as
// TaskLaneHeld does: two --unique tasks of a key cannot both find it
// free.
func (r *reads) TaskKeyHolder(ctx context.Context, key, exceptID string) (*store.KeyHolder, error) {
	if r.tx != nil {
		if err := r.tx.lockKey(ctx, key); err != nil {
			return nil, err
		}
	}
	var h store.KeyHolder
	err := r.q.QueryRow(r.cx(ctx), sqlKeyHolder, key, exceptID).Scan(&h.ID, &h.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// lockDepsOf takes, in a transaction, the task lock of every dependency
// of id, in sorted order, so that what follows reads each one after any
// transaction ending it has counted itself off (TaskDependencyDone), or
// before it starts to.
func (r *reads) lockDepsOf(ctx context.Context, id string) error {
	if r.tx == nil {
		return nil
	}
	deps, err := queryStrings(r.tx.ctx, r.tx.ptx, `SELECT dep_id FROM task_deps WHERE task_id = $1`, id)
	if err != nil {
		return err
	}
	slices.Sort(deps)
	for _, dep := range deps {
		if err := r.tx.lockTask(ctx, dep); err != nil {
			return err
		}
	}
	return nil
}

func (r *reads) TaskDeadDependency(ctx context.Context, id string) (string, string, error) {
	if err := r.lockDepsOf(ctx, id); err != nil {
		return "", "", err
	}
	var dep, state string
	err := r.q.QueryRow(r.cx(ctx), sqlDeadDependency, id).Scan(&dep, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	return dep, state, err
}

// TaskDependentsWaiting takes dep's task lock in a transaction: the end
// of dep that cancels its dependents and an enqueue of one of them that
// looks for a dead dependency (TaskDeadDependency) take turns.
func (r *reads) TaskDependentsWaiting(ctx context.Context, dep string) ([]*store.Task, error) {
	if r.tx != nil {
		if err := r.tx.lockTask(ctx, dep); err != nil {
			return nil, err
		}
	}
	rows, err := r.q.Query(r.cx(ctx), sqlDependentsWaiting, dep)
	return scanTasks(rows, err)
}

// TaskDependencyDone takes dep's task lock first, in a statement of its
// own: an enqueue counting its dependencies (TaskDepsNotDone) either
// went before, and its dependency row is seen here, or goes after and
// sees dep done.
func (tx *Tx) TaskDependencyDone(ctx context.Context, dep string) ([]*store.Task, error) {
	if err := tx.lockTask(ctx, dep); err != nil {
		return nil, err
	}
	rows, err := tx.ptx.Query(tx.ctx, sqlDependencyDone, dep)
	return scanTasks(rows, err)
}

func (tx *Tx) TaskSetBlockedReason(ctx context.Context, id, reason string) error {
	_, err := tx.ptx.Exec(tx.ctx, `UPDATE tasks SET blocked_reason = $1 WHERE id = $2 AND state = 'blocked'`, nullable(reason), id)
	return err
}

func (tx *Tx) TaskLaneAdvance(ctx context.Context, key string) error {
	if err := tx.lockKey(ctx, key); err != nil {
		return err
	}
	_, err := tx.ptx.Exec(tx.ctx, sqlLaneAdvance, key)
	return err
}

// taskUpdateSQL holds the statement for each set of fields and failure
// class a TaskUpdate writes (taskUpdateText).
var taskUpdateSQL store.TaskUpdateStatements

func (tx *Tx) TaskUpdate(ctx context.Context, u store.TaskUpdate) (bool, error) {
	q, err := taskUpdateSQL.For(u, taskUpdateText)
	if err != nil {
		return false, err
	}
	args := make([]any, 0, 14)
	args = append(args, u.ID, u.From, u.To, u.At)
	for _, c := range taskUpdateCols {
		if u.Set&c.bit != 0 && c.args != nil {
			args = c.args(u, args)
		}
	}
	tag, err := tx.ptx.Exec(tx.ctx, q, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// taskUpdateCols are the fields a TaskUpdate may write, in the order of
// their parameters: each bit's assignments (with _ for each parameter),
// and the values it binds (none for a constant).
var taskUpdateCols = []struct {
	bit  store.TaskFields
	set  string
	args func(u store.TaskUpdate, args []any) []any
}{
	{store.SetSeq, "seq = _", func(u store.TaskUpdate, a []any) []any { return append(a, u.Seq) }},
	{store.SetLaneHead, "lane_head = _", func(u store.TaskUpdate, a []any) []any { return append(a, u.LaneHead) }},
	{store.SetHold, "hold = _", func(u store.TaskUpdate, a []any) []any { return append(a, u.Hold) }},
	{store.SetBlockedReason, "blocked_reason = _", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.BlockedReason)) }},
	{store.SetNotBefore, "not_before = _, not_before_why = _", func(u store.TaskUpdate, a []any) []any {
		return append(a, nullable(u.NotBefore), nullable(u.NotBeforeWhy))
	}},
	{store.SetTodoAt, "todo_at = _", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.TodoAt)) }},
	{store.SetFinishedAt, "finished_at = _", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.FinishedAt)) }},
	{store.SetReason, "reason = _", func(u store.TaskUpdate, a []any) []any { return append(a, nullable(u.Reason)) }},
	{store.ClearWarned, "warned = false", nil},
	{store.ResetFails, "fails_other = 0, fails_transient = 0, fails_timeout = 0", nil},
}

// taskUpdateText is the UPDATE for the fields f and failure class fc
// (1-based; 0 none): $1 the id, $2 the state from, $3 the state to, $4
// the time, then the fields' values in taskUpdateCols' order.
func taskUpdateText(f store.TaskFields, fc int) string {
	var b strings.Builder
	b.WriteString(`UPDATE tasks SET state = $3, updated_at = $4`)
	n := 4
	for _, c := range taskUpdateCols {
		if f&c.bit == 0 {
			continue
		}
		set := c.set
		for i := strings.Index(set, "= _"); i >= 0; i = strings.Index(set, "= _") {
			n++
			set = set[:i] + "= $" + strconv.Itoa(n) + set[i+3:]
		}
		b.WriteString(", " + set)
	}
	if fc > 0 {
		col := store.FailColumns[fc-1].Col
		b.WriteString(", " + col + " = " + col + " + 1")
	}
	b.WriteString(` WHERE id = $1 AND state = $2`)
	return b.String()
}
