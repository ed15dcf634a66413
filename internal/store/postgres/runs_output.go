package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

func (tx *Tx) RunOutputSave(ctx context.Context, o store.RunOutput) error {
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = []byte{}
	}
	if stderr == nil {
		stderr = []byte{}
	}
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO run_output (run_id, host, stdout, stderr, stdout_size, stderr_size)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (run_id) DO UPDATE SET host = excluded.host, stdout = excluded.stdout, stderr = excluded.stderr,
			stdout_size = excluded.stdout_size, stderr_size = excluded.stderr_size`,
		o.RunID, clean(o.Host), stdout, stderr, o.StdoutSize, o.StderrSize)
	return err
}

func (r *reads) RunOutputGet(ctx context.Context, id string) (*store.RunOutput, error) {
	o := store.RunOutput{RunID: id}
	err := r.q.QueryRow(r.cx(ctx), `SELECT host, stdout, stderr, stdout_size, stderr_size FROM run_output WHERE run_id = $1`, id).
		Scan(&o.Host, &o.Stdout, &o.Stderr, &o.StdoutSize, &o.StderrSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return &o, err
}
