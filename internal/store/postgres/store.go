package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// conn is what both the pool and a transaction offer.
type conn interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// reads implements store.Reader over the pool (DB) or a transaction (Tx).
//
// A read outside a transaction is one statement, consistent on its own.
// A read that calls back (TaskList, EventList…) reads its rows first and
// calls back after: one connection cannot run a query while another's rows
// are open, and the callback may read the store.
type reads struct {
	q conn
	// tx is the transaction the reads belong to; nil over the pool.
	tx *Tx
}

// cx is the context of a read's statements: in a transaction, the
// transaction's (it runs to its end whatever the caller's does).
func (r *reads) cx(ctx context.Context) context.Context {
	if r.tx != nil {
		return r.tx.ctx
	}
	return ctx
}

// backend is DB as a store.Store.
type backend struct {
	*DB
	reads
}

// Store returns d as the domain's store.
func (d *DB) Store() store.Store {
	return &backend{DB: d, reads: reads{q: poolReads{d.Pool}}}
}

// DBOf is the PostgreSQL handle behind a store of this package's, for the
// tests that reach into PostgreSQL itself; nil for another backend.
func DBOf(s store.Store) *DB {
	if b, ok := s.(*backend); ok {
		return b.DB
	}
	return nil
}

func (b *backend) Write(ctx context.Context, fn func(store.Tx) error) error {
	return b.write(ctx, 0, func(tx *Tx) error { return fn(tx) })
}

func (b *backend) WriteWithin(ctx context.Context, wait time.Duration, fn func(store.Tx) error) error {
	return b.write(ctx, max(wait, time.Millisecond), func(tx *Tx) error { return fn(tx) })
}

// CheckWritable asks the server whether this session may write: a
// standby, or a database set read-only, may not.
func (b *backend) CheckWritable(ctx context.Context) error {
	var ro string
	if err := b.Pool.QueryRow(ctx, `SELECT current_setting('transaction_read_only')`).Scan(&ro); err != nil {
		return b.Explain(err)
	}
	if ro == "on" {
		return fmt.Errorf("%w: %s accepts reads only (a standby, or default_transaction_read_only); point cq at the primary", store.ErrReadOnly, b.addr)
	}
	return nil
}

// Attend asks nothing of a long-lived writer: the server keeps its own
// upkeep (autovacuum, checkpoints).
func (b *backend) Attend(context.Context) (func(), error) { return func() {}, nil }

// Leave has nothing to trim.
func (b *backend) Leave(context.Context) {}

// Explain names the store in a failure of the server or the connection.
func (b *backend) Explain(err error) error { return b.explain(err) }

func (b *backend) Close() error { return b.DB.Close() }

// explain turns err into words a user can act on, naming the store.
func (d *DB) explain(err error) error {
	if err == nil {
		return nil
	}
	// Explained already (a write explains its error, and the command
	// that called it explains what it got): said once.
	if strings.HasPrefix(err.Error(), d.addr+": ") {
		return err
	}
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrBusy), errors.Is(err, store.ErrReadOnly),
		errors.Is(err, store.ErrFull), errors.Is(err, ErrUnknownOutcome), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pe) && pe.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%w: %s accepts reads only (a standby, or default_transaction_read_only); point cq at the primary: %w", store.ErrReadOnly, d.addr, err)
	case errors.As(err, &pe) && (pe.Code == "53100" || pe.Code == "53200"): // disk_full, out_of_memory
		return fmt.Errorf("%w: %s: %w", store.ErrFull, d.addr, err)
	case errors.As(err, &pe):
		return fmt.Errorf("%s: %w", d.addr, err)
	case isConnError(err):
		return fmt.Errorf("%s: cannot reach the database server: %w", d.addr, err)
	}
	return err
}

// nullable is s as text PostgreSQL stores (see clean), or NULL for "".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return clean(s)
}

// clean is s without what PostgreSQL's text refuses: a NUL byte, or a
// byte sequence that is not UTF-8, each replaced by U+FFFD. Only free
// text can hold them (a reason given by a user, a process's error);
// specs and event data are JSON, escaped already (docs/store.md).
func clean(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// str is a nullable text column as cq's "" for none.
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// queryStrings reads the one text column of every row of a query.
func queryStrings(ctx context.Context, q conn, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

var (
	_ store.Store    = (*backend)(nil)
	_ store.Tx       = (*Tx)(nil)
	_ store.Fixtures = (*Tx)(nil)
)
