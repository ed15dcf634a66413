package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

// The statements of store.IntakeReader and store.IntakeWriter; the
// creation of tasks is in intake_create.go.

const (
	// sqlRunLiveOfTask finds the run through UNIQUE (task_id, attempt),
	// newest attempt first; the live states are spelled as in runs_live
	// (runsLive).
	sqlRunLiveOfTask = `SELECT id, state FROM runs WHERE task_id = ? AND ` + runsLive + `
		ORDER BY attempt DESC LIMIT 1`
	sqlDependentsCancelled = `SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id
			WHERE d.dep_id = ? AND t.state = 'cancelled' AND t.reason IN (?, ?) ORDER BY t.seq, t.id`
)

func (r reads) TaskExists(ctx context.Context, id string) (bool, error) {
	var got string
	err := r.q.QueryRowContext(ctx, `SELECT id FROM tasks WHERE id = ?`, id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (r reads) TaskIDsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	// Every id character is ASCII below '~', so prefix + '~' bounds the
	// range.
	return queryStrings(ctx, r.q, `SELECT id FROM tasks WHERE id > ? AND id < ? ORDER BY id LIMIT ?`, prefix, prefix+"~", limit)
}

func (r reads) TaskState(ctx context.Context, id string) (string, error) {
	var state string
	err := r.q.QueryRowContext(ctx, `SELECT state FROM tasks WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return state, err
}

func (r reads) TaskSpec(ctx context.Context, id string) (string, string, error) {
	var spec, state string
	err := r.q.QueryRowContext(ctx, `SELECT spec, state FROM tasks WHERE id = ?`, id).Scan(&spec, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", store.ErrNotFound
	}
	return spec, state, err
}

// TaskDependencyStates needs no lock: SQLite has one writer at a time.
func (r reads) TaskDependencyStates(ctx context.Context, deps []string) ([]string, error) {
	out := make([]string, len(deps))
	for i, id := range deps {
		st, err := r.TaskState(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

func (r reads) TaskDepsNotDone(ctx context.Context, id string) (int, error) {
	var left int
	err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_deps d JOIN tasks t ON t.id = d.dep_id
			WHERE d.task_id = ? AND t.state != 'done'`, id).Scan(&left)
	return left, err
}

func (r reads) TaskDepsOf(ctx context.Context, id string) ([]string, error) {
	return queryStrings(ctx, r.q, `SELECT dep_id FROM task_deps WHERE task_id = ?`, id)
}

func (r reads) TaskDependentsCancelled(ctx context.Context, dep, reasonA, reasonB string) ([]string, error) {
	return queryStrings(ctx, r.q, sqlDependentsCancelled, dep, reasonA, reasonB)
}

func (r reads) RunLiveOfTask(ctx context.Context, taskID string) (string, string, error) {
	var id, state string
	err := r.q.QueryRowContext(ctx, sqlRunLiveOfTask, taskID).Scan(&id, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	return id, state, err
}

func (t *Tx) TaskDepsAdd(ctx context.Context, id string, deps []string) error {
	for i, dep := range deps {
		if _, err := t.ExecContext(ctx, `INSERT INTO task_deps (task_id, dep_id, pos) VALUES (?, ?, ?)`, id, dep, i); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) TaskChangeSpec(ctx context.Context, c store.TaskSpecChange) (bool, error) {
	res, err := t.ExecContext(ctx, `UPDATE tasks SET spec = ?, queue = ?, priority = ?, updated_at = ? WHERE id = ? AND state = ?`,
		c.Spec, c.Queue, c.Priority, c.At, c.ID, c.From)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func (t *Tx) TaskRetryReset(ctx context.Context, id, from string, depsLeft int) error {
	_, err := t.ExecContext(ctx, `UPDATE tasks SET deps_left = ?, not_before = NULL, not_before_why = NULL,
			fails_other = 0, fails_transient = 0, fails_timeout = 0 WHERE id = ? AND state = ?`, depsLeft, id, from)
	return err
}

func (t *Tx) RunCancelStep(ctx context.Context, c store.RunCancel) (bool, error) {
	var res sql.Result
	var err error
	if c.EndedAt == "" {
		res, err = t.ExecContext(ctx, `UPDATE runs SET state = ?, reason = COALESCE(?, reason) WHERE id = ? AND state = ?`,
			c.To, nullable(c.Reason), c.ID, c.From)
	} else {
		res, err = t.ExecContext(ctx, `UPDATE runs SET state = ?, reason = COALESCE(?, reason), ended_at = ? WHERE id = ? AND state = ?`,
			c.To, nullable(c.Reason), c.EndedAt, c.ID, c.From)
	}
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
