package queue

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// WorkerParams is what a worker says of itself in the workers table.
type WorkerParams struct {
	ID          string
	Host        string
	PID         int
	Queues      []string // none: every queue
	Concurrency int
	// Lease is the worker's lease TTL: it counts as live until this long
	// after its latest WorkerSeen.
	Lease time.Duration
}

// Worker is a live worker as cq workers shows it (its JSON shape
// in docs/commands.md).
type Worker struct {
	ID          string   `json:"id"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Queues      []string `json:"queues"` // empty: every queue
	Concurrency int      `json:"concurrency"`
	// Runs counts the runs it holds now (queued, running or cancelling).
	Runs      int    `json:"runs"`
	StartedAt string `json:"started_at"`
	LastSeen  string `json:"last_seen"`
}

const (
	// sqlWorkerLive holds for a workers row whose lease has not passed:
	// the lease columns are those of runs (see sqlLeaseValid).
	sqlWorkerLive = sqlLeaseValid
	// sqlWorkerRuns counts live runs by worker, from the runs_live index
	// (its condition repeated, see liveRuns).
	sqlWorkerRuns = `SELECT worker, COUNT(*) FROM runs WHERE ` + liveRuns + ` AND worker IS NOT NULL GROUP BY worker`
)

// WorkerSeen records that worker p lives, for another lease TTL from now:
// its row is written when it is missing (the first call, or after a
// maintenance pass deleted it as long dead) and refreshed otherwise,
// keeping its start time.
func (s *Store) WorkerSeen(ctx context.Context, p WorkerParams) error {
	queues := p.Queues
	if queues == nil {
		queues = []string{}
	}
	qj, err := json.Marshal(queues)
	if err != nil {
		return err
	}
	return s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		wall, bootID, until := s.leaseNow(now).lease(p.Lease)
		ts := FormatTime(now)
		_, err := tx.ExecContext(ctx, `INSERT INTO workers (id, host, pid, queues, concurrency, lease_ms, started_at,
			last_seen, boot_id, lease_until_ns, lease_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			concurrency = excluded.concurrency, lease_ms = excluded.lease_ms, last_seen = excluded.last_seen,
			boot_id = excluded.boot_id, lease_until_ns = excluded.lease_until_ns, lease_expires_at = excluded.lease_expires_at`,
			p.ID, p.Host, p.PID, string(qj), p.Concurrency, p.Lease.Milliseconds(), ts, ts, bootID, until, wall)
		return err
	})
}

// WorkerLeft deletes worker id's row: it stopped cleanly.
func (s *Store) WorkerLeft(ctx context.Context, id string) error {
	return s.writeSQL(ctx, func(tx *sqlite.Tx, _ time.Time) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id = ?`, id)
		return err
	})
}

// Workers lists the live workers, by start time, each with the number
// of runs it holds.
func (s *Store) Workers(ctx context.Context) ([]Worker, error) {
	now := s.leaseNow(s.now())
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT id, host, pid, queues, concurrency, started_at, last_seen
		FROM workers WHERE `+sqlWorkerLive+` ORDER BY started_at, id`, now.args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Worker{}
	for rows.Next() {
		var w Worker
		var qj string
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &qj, &w.Concurrency, &w.StartedAt, &w.LastSeen); err != nil {
			return nil, err
		}
		// A row is written only by WorkerSeen; should its queues be
		// unreadable all the same, the worker is still listed.
		if json.Unmarshal([]byte(qj), &w.Queues) != nil || w.Queues == nil {
			w.Queues = []string{}
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return out, nil
	}
	counts := map[string]int{}
	crows, err := s.DB.SQL.QueryContext(ctx, sqlWorkerRuns)
	if err != nil {
		return nil, err
	}
	if err := scanCounts(crows, counts); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Runs = counts[out[i].ID]
	}
	return out, nil
}

// AnyWorkerLive reports whether at least one worker is live.
func (s *Store) AnyWorkerLive(ctx context.Context) (bool, error) {
	return anyWorkerLive(ctx, s.DB.SQL, s.leaseNow(s.now()))
}

func anyWorkerLive(ctx context.Context, q querier, now leaseNow) (bool, error) {
	var live bool
	err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM workers WHERE `+sqlWorkerLive+`)`, now.args()...).Scan(&live)
	return live, err
}

// SweepWorkers deletes the rows of workers whose lease passed more than
// dead ago (by the wall clock): gone without a word, long since. A
// worker that lives after all writes its row again at its next tick.
func (s *Store) SweepWorkers(ctx context.Context, dead time.Duration) (int, error) {
	var n int64
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE lease_expires_at < ?`, FormatTime(now.Add(-dead)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
