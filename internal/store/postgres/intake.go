package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The statements of store.IntakeReader and store.IntakeWriter.

func (r *reads) TaskExists(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := r.q.QueryRow(r.cx(ctx), `SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}

func (r *reads) TaskIDsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	// Every id character is ASCII below '~', so prefix + '~' bounds the
	// range, which the primary key's "C" order serves.
	var lim any = limit
	if limit < 0 {
		lim = nil // no limit, as SQLite reads a negative one
	}
	ids, err := queryStrings(r.cx(ctx), r.q, `SELECT id FROM tasks WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3`,
		prefix, prefix+"~", lim)
	if ids == nil && err == nil {
		ids = []string{}
	}
	return ids, err
}

func (r *reads) TaskState(ctx context.Context, id string) (string, error) {
	var state string
	err := r.q.QueryRow(r.cx(ctx), `SELECT state FROM tasks WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return state, err
}

// TaskDependencyStates takes the task lock of each of deps, sorted, in a
// transaction, then reads their states: see the contract.
func (r *reads) TaskDependencyStates(ctx context.Context, deps []string) ([]string, error) {
	if r.tx != nil {
		if err := r.tx.lockTasks(deps); err != nil {
			return nil, err
		}
	}
	rows, err := r.q.Query(r.cx(ctx), `SELECT id, state FROM tasks WHERE id = ANY($1)`, deps)
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	var id, state string
	if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error { got[id] = state; return nil }); err != nil {
		return nil, err
	}
	out := make([]string, len(deps))
	for i, d := range deps {
		out[i] = got[d]
	}
	return out, nil
}

func (r *reads) TaskSpec(ctx context.Context, id string) (spec, state string, err error) {
	err = r.q.QueryRow(r.cx(ctx), `SELECT spec, state FROM tasks WHERE id = $1`, id).Scan(&spec, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", store.ErrNotFound
	}
	return spec, state, err
}

// TaskDepsNotDone counts under the task locks of id's dependencies in a
// transaction (see lockDepsOf): a dependency ending done at the same
// time either is seen done here or counts itself off id afterwards.
func (r *reads) TaskDepsNotDone(ctx context.Context, id string) (int, error) {
	if err := r.lockDepsOf(ctx, id); err != nil {
		return 0, err
	}
	var left int
	err := r.q.QueryRow(r.cx(ctx), `SELECT count(*) FROM task_deps d JOIN tasks t ON t.id = d.dep_id
		WHERE d.task_id = $1 AND t.state <> 'done'`, id).Scan(&left)
	return left, err
}

func (r *reads) TaskDepsOf(ctx context.Context, id string) ([]string, error) {
	return queryStrings(r.cx(ctx), r.q, `SELECT dep_id FROM task_deps WHERE task_id = $1`, id)
}

func (r *reads) TaskDependentsCancelled(ctx context.Context, dep, reasonA, reasonB string) ([]string, error) {
	// SQLite orders a NULL seq (a task cancelled in inbox) first.
	ids, err := queryStrings(r.cx(ctx), r.q, `SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = $1 AND t.state = 'cancelled' AND t.reason IN ($2, $3) ORDER BY t.seq NULLS FIRST, t.id`,
		dep, clean(reasonA), clean(reasonB))
	if ids == nil && err == nil {
		ids = []string{}
	}
	return ids, err
}

func (r *reads) RunLiveOfTask(ctx context.Context, taskID string) (id, state string, err error) {
	err = r.q.QueryRow(r.cx(ctx), `SELECT id, state FROM runs WHERE task_id = $1 AND state IN ('queued','running','cancelling')
		ORDER BY attempt DESC LIMIT 1`, taskID).Scan(&id, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	return id, state, err
}

func (tx *Tx) TaskCreateInbox(ctx context.Context, t store.Task, at string) error {
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO tasks (id, state, queue, key, priority, spec, is_unique, hold, deps_left,
		not_before, not_before_why, created_at, updated_at) VALUES ($1, 'inbox', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
		t.ID, t.Queue, nullable(t.Key), t.Priority, t.Spec, t.Unique, t.Hold, t.DepsLeft,
		nullable(t.NotBefore), nullable(t.NotBeforeWhy), at)
	return err
}

// TaskCreateEnqueued takes the seq in the INSERT, after the key's lock
// (taken already by TaskLaneHeld or TaskKeyHolder when the caller asked),
// so that a lane's seqs follow the order its writers took the lock.
func (tx *Tx) TaskCreateEnqueued(ctx context.Context, t store.Task, at string) error {
	if t.Key != "" {
		if err := tx.lockKey(ctx, t.Key); err != nil {
			return err
		}
	}
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO tasks (id, state, queue, key, priority, seq, lane_head, spec, is_unique, hold,
		deps_left, not_before, not_before_why, blocked_reason, todo_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, nextval('task_seq'), $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)`,
		t.ID, t.State, t.Queue, nullable(t.Key), t.Priority, t.LaneHead, t.Spec, t.Unique, t.Hold,
		t.DepsLeft, nullable(t.NotBefore), nullable(t.NotBeforeWhy), nullable(t.BlockedReason), nullable(t.TodoAt), at)
	if err != nil {
		return err
	}
	return tx.createdEvents(ctx, &t, at)
}

// createdEvents adds the two events of a task created through the
// gateway step: created into inbox, then on to its state.
func (tx *Tx) createdEvents(ctx context.Context, t *store.Task, at string) error {
	if err := tx.EventAdd(ctx, store.Event{At: at, Kind: "task.created", TaskID: t.ID, To: "inbox"}); err != nil {
		return err
	}
	return tx.EventAdd(ctx, store.Event{At: at, Kind: "task." + t.State, TaskID: t.ID, From: "inbox", To: t.State})
}

// sqlCreateEnqueuedBatch inserts the tasks of the arrays in their order:
// their seqs, volatile, are taken after the sort by ordinality, and pos
// is given in the order the rows are inserted, so both follow the input
// as one TaskCreateEnqueued per task would.
const sqlCreateEnqueuedBatch = `INSERT INTO tasks (id, state, queue, priority, seq, lane_head, spec, hold,
		not_before, not_before_why, blocked_reason, todo_at, created_at, updated_at)
	SELECT r.id, r.state, r.queue, r.priority, nextval('task_seq'), true, r.spec, r.hold,
		NULLIF(r.not_before, ''), NULLIF(r.not_before_why, ''), NULLIF(r.blocked_reason, ''), NULLIF(r.todo_at, ''), $1, $1
	FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::bool[], $8::text[], $9::text[], $10::text[], $11::text[])
		WITH ORDINALITY AS r(id, state, queue, priority, spec, hold, not_before, not_before_why, blocked_reason, todo_at, n)
	ORDER BY r.n`

func (tx *Tx) TaskCreateEnqueuedBatch(ctx context.Context, ts []*store.Task, at string) error {
	if len(ts) == 0 {
		return nil
	}
	n := len(ts)
	var (
		ids, states, queues, specs = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nbs, nbws, brs, todos      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		prios                      = make([]int, n)
		holds                      = make([]bool, n)
	)
	for i, t := range ts {
		ids[i], states[i], queues[i], specs[i] = t.ID, t.State, t.Queue, t.Spec
		nbs[i], nbws[i], brs[i], todos[i] = t.NotBefore, t.NotBeforeWhy, clean(t.BlockedReason), t.TodoAt
		prios[i], holds[i] = t.Priority, t.Hold
	}
	if _, err := tx.ptx.Exec(tx.ctx, sqlCreateEnqueuedBatch, at, ids, states, queues, prios, specs, holds, nbs, nbws, brs, todos); err != nil {
		return err
	}
	for _, t := range ts {
		if err := tx.createdEvents(ctx, t, at); err != nil {
			return err
		}
	}
	return nil
}

func (tx *Tx) TaskDepsAdd(ctx context.Context, id string, deps []string) error {
	if len(deps) == 0 {
		return nil
	}
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO task_deps (task_id, dep_id, pos)
		SELECT $1, d.dep, d.n - 1 FROM unnest($2::text[]) WITH ORDINALITY AS d(dep, n)`, id, deps)
	return err
}

func (tx *Tx) TaskChangeSpec(ctx context.Context, c store.TaskSpecChange) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE tasks SET spec = $1, queue = $2, priority = $3, updated_at = $4 WHERE id = $5 AND state = $6`,
		c.Spec, c.Queue, c.Priority, c.At, c.ID, c.From)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func (tx *Tx) TaskRetryReset(ctx context.Context, id, from string, depsLeft int) error {
	_, err := tx.ptx.Exec(tx.ctx, `UPDATE tasks SET deps_left = $1, not_before = NULL, not_before_why = NULL,
		fails_other = 0, fails_transient = 0, fails_timeout = 0 WHERE id = $2 AND state = $3`, depsLeft, id, from)
	return err
}

func (tx *Tx) RunCancelStep(ctx context.Context, c store.RunCancel) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE runs SET state = $1, reason = COALESCE($2, reason),
		ended_at = COALESCE($3, ended_at) WHERE id = $4 AND state = $5`,
		c.To, nullable(c.Reason), nullable(c.EndedAt), c.ID, c.From)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
