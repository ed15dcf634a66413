package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

// QueueCols are the columns ScanQueue reads, in its order.
const QueueCols = `name, paused, concurrency, retries, backoff_ms, transient_retries, timeout_retries, timeout_ms, start_timeout_ms, warn_after_ms,
	timeout_counts_asks`

// ScanQueue reads a row of QueueCols.
func ScanQueue(sc interface{ Scan(...any) error }) (*store.Queue, error) {
	var q store.Queue
	err := sc.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
		&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks)
	if err != nil {
		return nil, err
	}
	return &q, nil
}

func (r reads) QueueGet(ctx context.Context, name string) (*store.Queue, error) {
	q, err := ScanQueue(r.q.QueryRowContext(ctx, `SELECT `+QueueCols+` FROM queues WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return q, err
}

func (t *Tx) QueueEnsure(ctx context.Context, name, at string) error {
	_, err := t.ExecContext(ctx, `INSERT INTO queues (name, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		name, at, at)
	return err
}
