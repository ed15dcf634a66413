package postgres

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// poolReads is the conn of reads outside a transaction: a read that could
// not reach the server (a connection lost, a primary failing over) changed
// nothing and is sent again, with a jittered backoff, for up to
// readRetryFor. Exec and batches are passed through untouched: what they
// carry may be a write, whose outcome a retry must not guess.
type poolReads struct{ p *pgxpool.Pool }

// readRetryFor bounds the retries of one read: longer than a failover
// takes (a dead host given up in connect_timeout, a standby promoted in
// a few seconds), short enough that a command run by hand does not hang.
const readRetryFor = 15 * time.Second

func retryRead(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(readRetryFor)
	backoff := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !isConnError(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (c poolReads) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	var rows pgx.Rows
	var has bool
	err := retryRead(ctx, func() error {
		var err error
		rows, err = c.p.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		// A lost connection shows in the first row's read: take it here,
		// where the query can still be sent again.
		if has = rows.Next(); !has {
			rows.Close()
			return rows.Err()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &peeked{Rows: rows, pending: true, has: has}, nil
}

func (c poolReads) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &retryRow{c: c, ctx: ctx, sql: sql, args: args}
}

func (c poolReads) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.p.Exec(ctx, sql, args...)
}

func (c poolReads) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return c.p.SendBatch(ctx, b)
}

// peeked is rows whose first Next was called already, and said has.
type peeked struct {
	pgx.Rows
	pending, has bool
}

func (p *peeked) Next() bool {
	if p.pending {
		p.pending = false
		return p.has
	}
	return p.Rows.Next()
}

// retryRow is QueryRow's row, read (and sent again) at Scan.
type retryRow struct {
	c    poolReads
	ctx  context.Context
	sql  string
	args []any
}

func (r *retryRow) Scan(dest ...any) error {
	return retryRead(r.ctx, func() error { return r.c.p.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...) })
}
