package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// querier is what both the pool and a transaction offer.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// reads implements store.Reader over the pool (DB) or a transaction (Tx).
type reads struct{ q querier }

// backend is DB as a store.Store: its Write hands the domain a store.Tx.
type backend DB

// Store returns d as the domain's store.
func (d *DB) Store() store.Store { return (*backend)(d) }

func (b *backend) Write(ctx context.Context, fn func(store.Tx) error) error {
	return (*DB)(b).Write(ctx, func(tx *Tx) error { return fn(tx) })
}

func (b *backend) WriteWithin(ctx context.Context, wait time.Duration, fn func(store.Tx) error) error {
	return (*DB)(b).WriteWithin(ctx, wait, func(tx *Tx) error { return fn(tx) })
}

func (b *backend) Addr() string { return b.Path }

func (b *backend) CheckWritable(ctx context.Context) error { return (*DB)(b).CheckWritable(ctx) }

func (b *backend) ChangeWatch(ctx context.Context) (func() (bool, error), func(), error) {
	return (*DB)(b).ChangeWatch(ctx)
}

// Wakeups has none to give: a worker watches the database's folder.
func (b *backend) Wakeups(context.Context) (<-chan struct{}, func()) { return nil, func() {} }

// Exclusive is always ok: the processes of the store's one host take
// turns with lock files in their home.
func (b *backend) Exclusive(context.Context, string) (func(), bool, error) {
	return func() {}, true, nil
}

// Clock is the host's own: the store is on this host.
func (b *backend) Clock() func() time.Time { return nil }

func (b *backend) Attend(ctx context.Context) (func(), error) {
	d := (*DB)(b)
	release, herr := d.Hold()
	stop, cerr := d.BackgroundCheckpoints(ctx)
	return func() {
		if stop != nil {
			stop()
		}
		if release != nil {
			release()
		}
	}, errors.Join(herr, cerr)
}

func (b *backend) Leave(ctx context.Context) { (*DB)(b).TrimWAL(ctx) }

func (b *backend) Explain(err error) error { return Explain(b.Path, err) }

func (b *backend) Close() error { return (*DB)(b).Close() }

// DB is the SQLite handle behind a store of this package's, for the tests
// and tools that reach into SQLite itself; nil for another backend.
func DBOf(s store.Store) *DB {
	if b, ok := s.(*backend); ok {
		return (*DB)(b)
	}
	return nil
}

// nullable is s, or NULL for "".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// scanAll reads every row of rows with scan.
func scanAll[T any](rows *sql.Rows, err error, scan func(interface{ Scan(...any) error }) (*T, error)) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

var (
	_ store.Store = (*backend)(nil)
	_ store.Tx    = (*Tx)(nil)
)

// eachString calls fn with the one text column of each row, stopping at
// its first error.
func eachString(rows *sql.Rows, err error, fn func(string) error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return rows.Err()
}

// queryStrings reads the one text column of every row of a query.
func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
