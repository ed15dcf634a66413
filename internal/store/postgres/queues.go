package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// queueCols are the columns scanQueue reads, in its order.
const queueCols = `name, paused, concurrency, retries, backoff_ms, transient_retries, timeout_retries, timeout_ms,
	start_timeout_ms, warn_after_ms, timeout_counts_asks`

// scanQueue reads a row of queueCols.
func scanQueue(sc pgx.Row) (*store.Queue, error) {
	var q store.Queue
	err := sc.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
		&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks)
	if err != nil {
		return nil, err
	}
	return &q, nil
}

func (r *reads) QueueGet(ctx context.Context, name string) (*store.Queue, error) {
	q, err := scanQueue(r.q.QueryRow(r.cx(ctx), `SELECT `+queueCols+` FROM queues WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return q, err
}

// QueueEnsure inserts the row only when the statement does not see it
// already. ON CONFLICT DO NOTHING alone takes no lock, but on meeting a
// row that a transaction in flight has updated (a claim, whose trigger
// counts the queue's running runs) it waits for that transaction to end:
// enqueues of a busy queue would queue up behind its claims. The
// conflict clause is left for two that insert a new queue at once.
func (tx *Tx) QueueEnsure(ctx context.Context, name, at string) error {
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO queues (name, created_at, updated_at)
		SELECT $1, $2, $2 WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = $1)
		ON CONFLICT (name) DO NOTHING`, name, at)
	return err
}
