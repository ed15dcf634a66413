package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

// FixtureRunAdd inserts the run only if its task exists: no row inserted
// is a task not found.
func (tx *Tx) FixtureRunAdd(ctx context.Context, r store.RunView, queue string) error {
	var exit any
	if r.ExitCode != nil {
		exit = int32(*r.ExitCode)
	}
	tag, err := tx.ptx.Exec(tx.ctx, `INSERT INTO runs (id, task_id, attempt, state, queue, worker, exit_code, signal, error,
		created_at, started_at, ended_at) SELECT $1, id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM tasks WHERE id = $12`,
		r.ID, int32(r.Attempt), r.State, queue, nullable(r.Worker), exit, nullable(r.Signal), nullable(r.Error),
		r.CreatedAt, nullable(r.StartedAt), nullable(r.EndedAt), r.TaskID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return store.ErrNotFound
	}
	return nil
}
