package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Write runs fn in one write transaction (BEGIN IMMEDIATE) and commits it
// if fn returns nil. Every write of this process goes through one
// dedicated connection, taken from the pool on first use and kept: its
// page cache stays valid from one transaction to the next, and there is
// no database/sql transaction (whose watcher goroutine per transaction and
// per query in it cost more than the statements).
func (d *DB) Write(ctx context.Context, fn func(tx *Tx) error) error {
	return d.write(ctx, 0, fn)
}

// WriteWithin is Write that waits at most wait (instead of the busy
// timeout) for another process's write lock; then it returns ErrBusy
// having done nothing.
func (d *DB) WriteWithin(ctx context.Context, wait time.Duration, fn func(tx *Tx) error) error {
	return d.write(ctx, max(wait, time.Millisecond), fn)
}

// write is Write; a wait above 0 bounds the BEGIN's wait for the lock.
func (d *DB) write(ctx context.Context, wait time.Duration, fn func(tx *Tx) error) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if err != nil {
			d.dropIfReadOnly(err)
			err = Explain(d.Path, err)
		}
	}()
	if d.wconn == nil {
		c, err := d.SQL.Conn(ctx)
		if err != nil {
			return wrapBusy(err)
		}
		// A bigger page cache than SQLite's 2 MiB for the connection every
		// write goes through: a worker's transitions touch a dozen
		// b-trees, and a miss is a read of the WAL or the file
		// (docs/performance.md). And a checkpoint
		// every autoCheckpointPages rather than SQLite's 1000 (see there).
		if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA cache_size = -%d; PRAGMA wal_autocheckpoint = %d",
			writeCacheKiB, autoCheckpointPages)); err != nil {
			_ = c.Close()
			return wrapBusy(err)
		}
		d.wconn = c
	}
	// BEGIN may wait up to the busy timeout for another process: that wait
	// is the one the caller's context can cut short.
	if wait > 0 {
		if _, err := d.wconn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
			return wrapBusy(err)
		}
		_, err := d.wconn.ExecContext(ctx, "BEGIN IMMEDIATE")
		// The rest of the transaction (and every later one) waits as usual.
		if _, rerr := d.wconn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds())); rerr != nil && err == nil {
			_, _ = d.wconn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			return rerr
		}
		if isBusy(err) {
			return ErrBusy
		}
		if err != nil {
			return err
		}
	} else if _, err := d.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return wrapBusy(err)
	}
	bg := context.WithoutCancel(ctx)
	done := false
	defer func() {
		if !done {
			// fn failed or panicked; SQLite may have rolled back already
			// (after a busy or full error), so an error here means nothing.
			_, _ = d.wconn.ExecContext(bg, "ROLLBACK")
		}
	}()
	tx := &Tx{c: d.wconn, ctx: bg}
	tx.reads = reads{tx}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Flush(); err != nil {
		return err
	}
	if _, err := d.wconn.ExecContext(bg, "COMMIT"); err != nil {
		return wrapBusy(err)
	}
	done = true
	d.commits++
	if d.ckpt != nil && d.commits%ckptEveryCommits == 0 {
		select {
		case d.ckpt <- struct{}{}:
		default: // one is running or due: it takes these commits too
		}
	}
	return nil
}

// writeCacheKiB is the page cache of the write connection, in KiB.
const writeCacheKiB = 8192

// dropIfReadOnly forgets the write connection, and the idle ones, after
// err says the store is read-only: SQLite opened the file read-only
// because it was so then (permissions, an immutable file, a read-only
// mount), and such a connection stays read-only once the file is writable
// again. The next write opens the file afresh, so a long-lived worker
// recovers when the store does. Called under mu.
func (d *DB) dropIfReadOnly(err error) {
	var se sqlite3.Error
	if !errors.As(err, &se) || se.Code != sqlite3.ErrReadonly || d.wconn == nil {
		return
	}
	_ = d.wconn.Raw(func(any) error { return driver.ErrBadConn })
	_ = d.wconn.Close()
	d.wconn = nil
	d.SQL.SetMaxIdleConns(0)
	d.SQL.SetMaxIdleConns(8)
}

// Tx is a write transaction on the store's one write connection. Its
// statements run without the caller's cancellation: a transaction, once
// begun, runs to its commit or rollback (each takes microseconds), and a
// statement given a cancellable context costs the driver a goroutine.
type Tx struct {
	// reads are the store's reads (store.Reader) in this transaction.
	reads
	c   *sql.Conn
	ctx context.Context
	// Rows added with Add, not yet written, and the batch they go to (a
	// transaction collects one batch at a time).
	batch *Batch
	rows  []any
	n     int
	// savepoints are the names of the open savepoints.
	savepoints []string
}

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	return t.c.ExecContext(t.ctx, q, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.c.QueryContext(t.ctx, q, args...)
}

// QueryRowContext runs a one-row query in the transaction.
func (t *Tx) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	return t.c.QueryRowContext(t.ctx, q, args...)
}

// Run runs a statement that returns no rows, and whose row count and
// rowid are not needed, through the driver's query path. go-sqlite3 binds an exec's arguments with one cgo call each,
// while a query's arguments (strings, integers, nil) are bound, and the
// first step taken, in one crossing: for a statement of several hundred
// values that is most of its cost. The first step runs the whole
// statement; closing the rows resets it.
func (t *Tx) Run(q string, args ...any) error {
	rows, err := t.c.QueryContext(t.ctx, q, args...)
	if err != nil {
		return err
	}
	return rows.Close()
}

// ExecMany runs a statement of many values (a multi-row INSERT, an
// UPDATE of many ids) as Run does, then reads its row count and the last
// rowid it inserted: one more query, far cheaper than binding the values
// one cgo call each. Its Result holds the figures read at once.
func (t *Tx) ExecMany(_ context.Context, q string, args ...any) (sql.Result, error) {
	if err := t.Run(q, args...); err != nil {
		return nil, err
	}
	var r manyResult
	if err := t.c.QueryRowContext(t.ctx, `SELECT changes(), last_insert_rowid()`).Scan(&r.changes, &r.lastID); err != nil {
		return nil, err
	}
	return r, nil
}

// manyResult is ExecMany's sql.Result.
type manyResult struct{ changes, lastID int64 }

func (r manyResult) LastInsertId() (int64, error) { return r.lastID, nil }
func (r manyResult) RowsAffected() (int64, error) { return r.changes, nil }

// Savepoint writes the pending rows, which precede it, then opens a
// savepoint. So every row still pending later was added after the newest
// savepoint: RollbackTo drops them all, and SQLite undoes those written
// since.
func (t *Tx) Savepoint(name string) error {
	if err := t.Flush(); err != nil {
		return err
	}
	if _, err := t.c.ExecContext(t.ctx, "SAVEPOINT "+name); err != nil {
		return err
	}
	t.savepoints = append(t.savepoints, name)
	return nil
}

// RollbackTo undoes the writes since the savepoint name, rows added since
// included; the savepoint stays open.
func (t *Tx) RollbackTo(name string) error {
	i, err := t.endSavepoint("ROLLBACK TO ", name)
	if err != nil {
		return err
	}
	t.rows, t.n = t.rows[:0], 0
	t.savepoints = t.savepoints[:i+1]
	return nil
}

// Release closes the savepoint name and those opened after it; their
// writes stay part of the transaction.
func (t *Tx) Release(name string) error {
	i, err := t.endSavepoint("RELEASE ", name)
	if err != nil {
		return err
	}
	t.savepoints = t.savepoints[:i]
	return nil
}

// endSavepoint runs verb (ROLLBACK TO or RELEASE) on the open savepoint
// name and returns its place among the open ones.
func (t *Tx) endSavepoint(verb, name string) (int, error) {
	i := t.mark(name)
	if i < 0 {
		return 0, fmt.Errorf("no savepoint %q", name)
	}
	_, err := t.c.ExecContext(t.ctx, verb+name)
	return i, err
}

func (t *Tx) mark(name string) int {
	for i := len(t.savepoints) - 1; i >= 0; i-- {
		if t.savepoints[i] == name {
			return i
		}
	}
	return -1
}
