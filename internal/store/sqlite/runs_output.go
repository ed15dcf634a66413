package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

func (t *Tx) RunOutputSave(ctx context.Context, o store.RunOutput) error {
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := t.ExecContext(ctx, `INSERT INTO run_output (run_id, host, stdout, stderr, stdout_size, stderr_size)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET host = excluded.host, stdout = excluded.stdout, stderr = excluded.stderr,
			stdout_size = excluded.stdout_size, stderr_size = excluded.stderr_size`,
		o.RunID, o.Host, nonNil(o.Stdout), nonNil(o.Stderr), o.StdoutSize, o.StderrSize)
	return err
}

func (r reads) RunOutputGet(ctx context.Context, id string) (*store.RunOutput, error) {
	o := store.RunOutput{RunID: id}
	err := r.q.QueryRowContext(ctx, `SELECT host, stdout, stderr, stdout_size, stderr_size FROM run_output WHERE run_id = ?`, id).
		Scan(&o.Host, &o.Stdout, &o.Stderr, &o.StdoutSize, &o.StderrSize)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return &o, err
}

// nonNil is b, or an empty slice for nil: the columns are NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
