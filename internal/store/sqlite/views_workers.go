package sqlite

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

// The workers table: one row per live worker, refreshed at its ticks.

// A workers row's lease columns are those of runs, judged the same way
// (leaseValidCond, with leaseCondArgs).
const (
	// sqlWorkerRuns counts live runs by worker, from the runs_live index
	// (its condition repeated, see runsLive).
	sqlWorkerRuns = `SELECT worker, COUNT(*) FROM runs WHERE ` + runsLive + ` AND worker IS NOT NULL GROUP BY worker`
)

func (r reads) WorkerListLive(ctx context.Context, at store.LeaseClock) ([]store.Worker, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT id, host, pid, queues, concurrency, started_at, last_seen
		FROM workers WHERE `+leaseValidCond+` ORDER BY started_at, id`, leaseCondArgs(at)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Worker{}
	for rows.Next() {
		var w store.Worker
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &w.Queues, &w.Concurrency, &w.StartedAt, &w.LastSeen); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func (r reads) WorkerAnyLive(ctx context.Context, at store.LeaseClock) (bool, error) {
	var live bool
	err := r.q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM workers WHERE `+leaseValidCond+`)`, leaseCondArgs(at)...).Scan(&live)
	return live, err
}

func (r reads) WorkerRunCounts(ctx context.Context, fn func(worker string, n int)) error {
	rows, err := r.q.QueryContext(ctx, sqlWorkerRuns)
	return scanCounts(rows, err, fn)
}

func (t *Tx) WorkerSave(ctx context.Context, w store.WorkerSeen) error {
	var bootID, until any
	if w.BootID != "" {
		bootID, until = w.BootID, w.LeaseUntilNS
	}
	_, err := t.ExecContext(ctx, `INSERT INTO workers (id, host, pid, queues, concurrency, lease_ms, started_at,
			last_seen, boot_id, lease_until_ns, lease_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			concurrency = excluded.concurrency, lease_ms = excluded.lease_ms, last_seen = excluded.last_seen,
			boot_id = excluded.boot_id, lease_until_ns = excluded.lease_until_ns, lease_expires_at = excluded.lease_expires_at`,
		w.ID, w.Host, w.PID, w.Queues, w.Concurrency, w.LeaseMS, w.At, w.At, bootID, until, w.LeaseExpires)
	return err
}

func (t *Tx) WorkerDelete(ctx context.Context, id string) error {
	_, err := t.ExecContext(ctx, `DELETE FROM workers WHERE id = ?`, id)
	return err
}

func (t *Tx) WorkerSweep(ctx context.Context, before string) (int, error) {
	res, err := t.ExecContext(ctx, `DELETE FROM workers WHERE lease_expires_at < ?`, before)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
