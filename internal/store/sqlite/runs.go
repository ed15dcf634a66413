package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

// The statements of store.RunReader and store.RunWriter.

// RunCols are the columns ScanRun reads.
const RunCols = `id, task_id, state, queue, COALESCE(lease_token,''), COALESCE(host,''),
	COALESCE(lease_expires_at,''), created_at, COALESCE(started_at,''), attempt, COALESCE(pgid,0),
	COALESCE(boot_id,''), COALESCE(lease_until_ns,0)`

// ScanRun reads RunCols into r, then more.
func ScanRun(sc interface{ Scan(...any) error }, r *store.Run, more ...any) error {
	return sc.Scan(append([]any{&r.ID, &r.TaskID, &r.State, &r.Queue, &r.Token, &r.Host, &r.LeaseExpires, &r.Created, &r.Started,
		&r.Attempt, &r.Pgid, &r.BootID, &r.LeaseUntil}, more...)...)
}

func (r reads) RunGet(ctx context.Context, id string) (*store.Run, error) {
	var run store.Run
	err := ScanRun(r.q.QueryRowContext(ctx, `SELECT `+RunCols+` FROM runs WHERE id = ?`, id), &run)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &run, nil
}
