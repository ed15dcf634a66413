package sqlite

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

var _ store.Fixtures = (*Tx)(nil)

func (t *Tx) FixtureRunAdd(ctx context.Context, r store.RunView, queue string) error {
	var exit any
	if r.ExitCode != nil {
		exit = *r.ExitCode
	}
	res, err := t.ExecContext(ctx, `INSERT INTO runs (id, task_id, attempt, state, queue, worker, exit_code, signal, error,
		created_at, started_at, ended_at) SELECT ?, id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?`,
		r.ID, r.Attempt, r.State, queue, nullable(r.Worker), exit, nullable(r.Signal), nullable(r.Error),
		r.CreatedAt, nullable(r.StartedAt), nullable(r.EndedAt), r.TaskID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err == nil {
			err = store.ErrNotFound
		}
		return err
	}
	return nil
}
