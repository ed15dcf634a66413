package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The workers table: one row per live worker, refreshed at its ticks.

// workerLiveCond is a workers row whose lease is valid at a LeaseClock
// ($1 its boot id or NULL, $2 its wall time, $3 its boot clock), by the
// rules of store.LeaseClock: on the boot clock when both the row and the
// clock have a boot id, on the wall clock otherwise.
const workerLiveCond = `(CASE WHEN boot_id IS NULL OR $1::text IS NULL THEN lease_expires_at > $2::text
	ELSE boot_id = $1::text AND lease_until_ns > $3::bigint END)`

// workerClockArgs are workerLiveCond's arguments at c.
func workerClockArgs(c store.LeaseClock) []any {
	return []any{nullable(c.BootID), c.Wall, c.BootNS}
}

func (r *reads) WorkerListLive(ctx context.Context, at store.LeaseClock) ([]store.Worker, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT id, host, pid, queues, concurrency, started_at, last_seen
		FROM workers WHERE `+workerLiveCond+` ORDER BY started_at, id`, workerClockArgs(at)...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Worker, error) {
		var w store.Worker
		err := row.Scan(&w.ID, &w.Host, &w.PID, &w.Queues, &w.Concurrency, &w.StartedAt, &w.LastSeen)
		return w, err
	})
	if out == nil && err == nil {
		out = []store.Worker{}
	}
	return out, err
}

func (r *reads) WorkerAnyLive(ctx context.Context, at store.LeaseClock) (bool, error) {
	var live bool
	err := r.q.QueryRow(r.cx(ctx), `SELECT EXISTS (SELECT 1 FROM workers WHERE `+workerLiveCond+`)`,
		workerClockArgs(at)...).Scan(&live)
	return live, err
}

// WorkerRunCounts reads runs_live (its condition repeated).
func (r *reads) WorkerRunCounts(ctx context.Context, fn func(worker string, n int)) error {
	return r.viewCounts(ctx, fn, `SELECT worker, count(*) FROM runs
		WHERE state IN ('queued','running','cancelling') AND worker IS NOT NULL GROUP BY worker`)
}

func (tx *Tx) WorkerSave(ctx context.Context, w store.WorkerSeen) error {
	var bootID, until any
	if w.BootID != "" {
		bootID, until = w.BootID, w.LeaseUntilNS
	}
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO workers (id, host, pid, queues, concurrency, lease_ms, started_at,
			last_seen, boot_id, lease_until_ns, lease_expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			concurrency = excluded.concurrency, lease_ms = excluded.lease_ms, last_seen = excluded.last_seen,
			boot_id = excluded.boot_id, lease_until_ns = excluded.lease_until_ns, lease_expires_at = excluded.lease_expires_at`,
		w.ID, clean(w.Host), w.PID, clean(w.Queues), w.Concurrency, w.LeaseMS, w.At, bootID, until, w.LeaseExpires)
	return err
}

func (tx *Tx) WorkerDelete(ctx context.Context, id string) error {
	_, err := tx.ptx.Exec(tx.ctx, `DELETE FROM workers WHERE id = $1`, id)
	return err
}

func (tx *Tx) WorkerSweep(ctx context.Context, before string) (int, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `DELETE FROM workers WHERE lease_expires_at < $1`, before)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
