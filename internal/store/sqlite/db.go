// Package db opens cq's store: it creates the file privately, sets the
// pragmas, applies the embedded migrations and runs write transactions. It
// knows nothing of tasks; internal/queue owns every statement about them.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/store"
	"github.com/mattn/go-sqlite3"
)

// ErrFutureSchema means the database was written by a newer cq; it is
// refused and left untouched.
var ErrFutureSchema = store.ErrFutureSchema

// ErrNotCq means the database file belongs to another application; it is
// left untouched.
var ErrNotCq = errors.New("not a cq store")

// busyTimeout is how long a statement waits for another process's lock.
const busyTimeout = 30 * time.Second

// ErrUnsupported means the URL names a backend this build cannot use yet.
var ErrUnsupported = store.ErrUnsupported

// DB is an open store. Reads go straight to SQL (autocommit, no lock);
// writes go through Write, which serialises them inside this process so
// that its goroutines queue on a mutex instead of SQLite's busy handler.
type DB struct {
	// reads are the store's reads (store.Reader) on the pool.
	reads
	SQL  *sql.DB
	Path string
	mu   sync.Mutex
	// wconn is the connection every Write uses (under mu).
	wconn *sql.Conn
	// commits counts this process's commits (under mu); ckpt, when set
	// (BackgroundCheckpoints), is told every ckptEveryCommits of them.
	commits int
	ckpt    chan struct{}
}

// PathFromURL turns a --db value into a SQLite file path. It accepts
// sqlite://PATH, sqlite:PATH and a bare path; postgres:// is refused until
// that backend exists.
func PathFromURL(raw string) (string, error) {
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return "", fmt.Errorf("%w: PostgreSQL support is not built yet; use a sqlite:// database", ErrUnsupported)
	case strings.HasPrefix(raw, "sqlite://"):
		return strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.Contains(raw, "://"):
		return "", fmt.Errorf("%w: %q (want sqlite://PATH)", ErrUnsupported, raw)
	}
	return raw, nil
}

// Open opens (creating if needed, mode 0600) the SQLite database at path
// and brings its schema up to date. A store this process cannot write
// is an error that says so (ErrReadOnly), as is a full disk (ErrFull).
func Open(ctx context.Context, path string) (*DB, error) {
	d, err := open(ctx, path)
	return d, Explain(path, err)
}

// OpenRead is Open for a process that only reads. SQLite reads a store
// in WAL mode through its -wal and -shm files, creating them if they are
// not there; on a read-only store whose -wal is gone (a clean close
// checkpointed everything into the file) it cannot, and Open fails. That
// file then holds the whole store, so it is opened immutable: read as
// it is, with no lock and no file created. A -wal that is there holds
// commits the file lacks, so without its -shm the store stays refused.
func OpenRead(ctx context.Context, path string) (*DB, error) {
	d, err := Open(ctx, path)
	if err == nil || !errors.Is(err, ErrReadOnly) {
		return d, err
	}
	if _, serr := os.Stat(path + "-wal"); serr == nil {
		if _, shmErr := os.Stat(path + "-shm"); shmErr == nil {
			return nil, err // not for want of a -shm (an old schema, say)
		}
		return nil, &FaultError{Kind: ErrReadOnly, Path: path, err: err,
			msg: fmt.Sprintf("cannot read the store %s: it is read-only and its -shm file is missing (SQLite must create it to read the -wal file beside it)", path)}
	} else if !errors.Is(serr, fs.ErrNotExist) {
		return nil, err
	}
	if _, serr := os.Stat(path); serr != nil {
		return nil, err
	}
	sqldb, oerr := sql.Open("sqlite3", dsn(path, url.Values{"mode": {"ro"}, "immutable": {"1"}}))
	if oerr != nil {
		return nil, err
	}
	ro := &DB{SQL: sqldb, Path: path, reads: reads{sqldb}}
	v, verr := ro.checkVersion(ctx)
	if verr != nil || v != LatestVersion() {
		// Another application's file, a newer cq's, or an older store
		// that needs a migration it cannot get: refused as Open did.
		_ = sqldb.Close()
		if verr != nil {
			return nil, verr
		}
		return nil, err
	}
	return ro, nil
}

// OpenPeek opens an existing store for reads that must change nothing,
// not even create a file: shell completion, which runs on every Tab press,
// possibly against a home that was never made. The store is opened
// read-only; when no -wal file is beside it, the file holds the whole
// store and is opened immutable, so SQLite creates no -wal or -shm. A
// missing store is fs.ErrNotExist, and one at another schema version
// (one that needs a migration, or a newer cq's) is refused, untouched.
func OpenPeek(ctx context.Context, path string) (*DB, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := fsutil.CheckFile(path, fi); err != nil {
		return nil, err
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := fsutil.CheckAbsentOrFile(p); err != nil {
			return nil, err
		}
	}
	extra := url.Values{"mode": {"ro"}}
	if _, err := os.Lstat(path + "-wal"); errors.Is(err, fs.ErrNotExist) {
		extra.Set("immutable", "1")
	}
	sqldb, err := sql.Open("sqlite3", dsn(path, extra))
	if err != nil {
		return nil, err
	}
	d := &DB{SQL: sqldb, Path: path, reads: reads{sqldb}}
	v, err := d.checkVersion(ctx)
	if err == nil && v != LatestVersion() {
		err = fmt.Errorf("%s has schema version %d, not %d", path, v, LatestVersion())
	}
	if err != nil {
		// A read-only connection neither checkpoints nor deletes files
		// when it closes.
		_ = sqldb.Close()
		return nil, err
	}
	return d, nil
}

// dsn is the driver's name for the store at path, with cq's settings and
// extra, SQLite URI parameters.
func dsn(path string, extra url.Values) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.Itoa(int(busyTimeout/time.Millisecond)))
	q.Set("_foreign_keys", "on")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	// Each connection keeps its statements prepared: preparing was a large
	// part of an enqueue's CPU time (docs/performance.md).
	q.Set("_stmt_cache_size", "128")
	for k, v := range extra {
		q[k] = v
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

func open(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("empty database path")
	}
	// SQLite opens these files by name and follows a symbolic link at
	// the database's own path (go-sqlite3 gives no way to pass
	// SQLITE_OPEN_NOFOLLOW); its -wal and -shm it opens with O_NOFOLLOW,
	// but a FIFO there would block it. So what is there is checked first.
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := fsutil.CheckAbsentOrFile(p); err != nil {
			return nil, err
		}
	}
	foreign, err := createPrivate(path)
	if err != nil {
		return nil, err
	}
	sqldb, err := sql.Open("sqlite3", dsn(path, nil))
	if err != nil {
		return nil, err
	}
	sqldb.SetMaxOpenConns(8)
	sqldb.SetMaxIdleConns(8)
	sqldb.SetConnMaxIdleTime(0)
	d := &DB{SQL: sqldb, Path: path, reads: reads{sqldb}}
	// The version is read before anything is written: a database from a
	// newer cq, or another application's, is refused untouched, even its
	// journal mode.
	v, err := d.checkVersion(ctx)
	if err != nil {
		// Not closed: closing the last connection to a WAL database
		// checkpoints it, which would rewrite the file we must leave
		// untouched. The connection goes when the process does.
		return nil, err
	}
	if v == LatestVersion() {
		// Up to date, so already in WAL mode (set before the first
		// migration): the common case costs one statement.
		privateSides(path, foreign)
		return d, nil
	}
	if err := d.walMode(ctx); err != nil {
		_ = sqldb.Close()
		return nil, err
	}
	if err := d.migrate(ctx); err != nil {
		_ = sqldb.Close()
		return nil, err
	}
	privateSides(path, foreign)
	return d, nil
}

// privateSides makes the -wal and -shm files beside a database file of
// another mode than 0600 private (every file cq makes is 0600): SQLite creates them
// with the database file's mode. They exist once a connection has read
// the store in WAL mode; another process may make them again later, and
// its cq makes them private in turn.
func privateSides(path string, foreign bool) {
	if !foreign {
		return
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(side); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() != 0o600 {
			_ = fsutil.ChmodFile(side, 0o600)
		}
	}
}

// createPrivate makes sure the database file exists with mode 0600 before
// SQLite opens it: SQLite gives the -wal and -shm files the mode of the
// database file, so they end up private too, whatever the umask.
// It reports whether an existing database file keeps another mode.
func createPrivate(path string) (foreign bool, err error) {
	// O_EXCL never follows a symbolic link: one at path is EEXIST.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		// SQLite opens it as it is, so it must be a regular file: SQLite
		// would write through a symbolic link, and block on a FIFO. An
		// empty file (made by someone else, say with touch) becomes a
		// store now, so it is made 0600 as if cq had created it: SQLite
		// gives the -wal and -shm files the mode of the database file. A
		// database with content keeps its mode, and its -wal and -shm are
		// made private once open (privateSides).
		fi, err := os.Lstat(path)
		if err != nil {
			return false, nil
		}
		if err := fsutil.CheckFile(path, fi); err != nil {
			return false, err
		}
		if fi.Mode().Perm() == 0o600 {
			return false, nil
		}
		if fi.Size() == 0 && fsutil.ChmodFile(path, 0o600) == nil {
			return false, nil
		}
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("database folder: %w", err)
	case err != nil:
		return false, fmt.Errorf("open database: %w", err)
	}
	defer f.Close()
	// Created just now, under whatever umask: make it exactly 0600.
	return false, f.Chmod(0o600)
}

// checkVersion reads the schema version and refuses, before anything is
// written, a newer one (ErrFutureSchema) and a database that is not a cq
// store (ErrNotCq): one at version 0 (new to cq) that already holds
// tables, or one at a version of cq's without all of cq's first tables.
// Such a file is another application's, and migrating it (or running
// cq's statements on it) would change it. Version and tables are read in
// one statement, so they agree even while another process migrates the
// store, and a short command still opens its store with one statement:
// the statements that follow would read the schema anyway.
func (d *DB) checkVersion(ctx context.Context) (int, error) {
	latest := LatestVersion()
	var v, tables, ours int
	err := d.SQL.QueryRowContext(ctx, `SELECT (SELECT user_version FROM pragma_user_version()),
		count(*), count(*) FILTER (WHERE name IN ('tasks', 'task_deps', 'runs', 'events', 'queues', 'system_state'))
		FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`).Scan(&v, &tables, &ours)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v > latest:
		return 0, fmt.Errorf("%w: %s has schema version %d, this cq knows up to %d; upgrade cq", ErrFutureSchema, d.Path, v, latest)
	// Migration 1 makes those six tables; every later version has them.
	case (v == 0 && tables > 0) || (v > 0 && ours < 6):
		return 0, fmt.Errorf("%w: %s holds another application's tables (schema version %d); give cq a file of its own", ErrNotCq, d.Path, v)
	}
	return v, nil
}

// walMode switches the database to WAL, once: the mode is stored in the
// file, so later connections find it set and this is a read. The switch
// needs an exclusive lock, and SQLite answers busy at once (without its
// busy handler, to avoid a deadlock) when another process opening the same
// new database holds a shared one; so it is retried here.
//
// A new, empty file also gets incremental auto-vacuum here, which lets cq
// cleanup give freed pages back in small steps instead of a VACUUM that
// locks everything. SQLite fixes it when it writes the file's first page,
// which the WAL switch does, so it is set just before, on the same
// connection. Never on every connection: on a store that has pages, the
// pragma is a write (page 1), so each command would take the write lock
// and append to the WAL, even a read or a refusal of a newer store.
func (d *DB) walMode(ctx context.Context) error {
	conn, err := d.SQL.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(busyTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var mode string
		if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil && !isBusy(err) {
			return fmt.Errorf("read journal mode: %w", err)
		} else if err == nil && strings.EqualFold(mode, "wal") {
			return nil
		}
		var pages int
		if err := conn.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err == nil && pages == 0 {
			if _, err := conn.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
				return fmt.Errorf("set auto-vacuum: %w", err)
			}
		}
		err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		switch {
		case err == nil && strings.EqualFold(mode, "wal"):
			return nil
		case err != nil && !isBusy(err):
			return fmt.Errorf("set WAL mode: %w", err)
		case time.Now().After(deadline):
			if err == nil {
				return fmt.Errorf("cannot switch %s to WAL mode (it stays %s)", d.Path, mode)
			}
			return fmt.Errorf("set WAL mode: %w", wrapBusy(err))
		}
		// Busy, or the mode did not change because another connection
		// held a lock: wait a little, with jitter, and try again.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay + time.Duration(rand.Int64N(int64(delay)))):
		}
	}
}

func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
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

// Batch is an INSERT whose rows a transaction collects (Add) and writes
// with one multi-row statement when it commits, or earlier at Flush: one
// statement for a transaction's rows costs far less than one per row.
// Rows written so get consecutive rowids in the order they were added.
type Batch struct {
	head string // INSERT INTO t (a, b, …) VALUES
	cols int

	mu    sync.Mutex
	texts map[int]string
}

// batchMaxRows bounds the rows of one statement; more are written in
// several.
const batchMaxRows = 256

// NewBatch returns the batch of rows of cols values each inserted by head,
// "INSERT INTO t (a, b, …) VALUES".
func NewBatch(head string, cols int) *Batch {
	return &Batch{head: head, cols: cols, texts: map[int]string{}}
}

// text is the statement for n rows, built once per n so that the
// connection's statement cache prepares it once.
func (b *Batch) text(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.texts[n]; ok {
		return q
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", b.cols), ",") + ")"
	q := b.head + strings.TrimSuffix(strings.Repeat(row+",", n), ",")
	b.texts[n] = q
	return q
}

// Add queues one row of b for this transaction. A row of another batch
// first writes the pending ones, so rows keep their order across batches.
func (t *Tx) Add(b *Batch, values ...any) error {
	if len(values) != b.cols {
		return fmt.Errorf("batch row has %d values, want %d", len(values), b.cols)
	}
	if t.batch != b {
		if err := t.Flush(); err != nil {
			return err
		}
		t.batch = b
	}
	t.rows = append(t.rows, values...)
	t.n++
	if t.n == batchMaxRows {
		return t.Flush()
	}
	return nil
}

// Flush writes the rows added so far. Statements whose effect depends on
// those rows being in place (reading or deleting them, or taking the next
// rowid of their table) must come after a Flush.
func (t *Tx) Flush() error {
	if t.n == 0 {
		return nil
	}
	err := t.Run(t.batch.text(t.n), t.rows...)
	t.rows, t.n = t.rows[:0], 0
	return err
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

// Write runs fn in one write transaction (BEGIN IMMEDIATE) and commits it
// if fn returns nil. Every write of this process goes through one
// dedicated connection, taken from the pool on first use and kept: its
// page cache stays valid from one transaction to the next, and there is
// no database/sql transaction (whose watcher goroutine per transaction and
// per query in it cost more than the statements).
func (d *DB) Write(ctx context.Context, fn func(tx *Tx) error) error {
	return d.write(ctx, 0, fn)
}

// ErrBusy is WriteWithin's answer when another connection held the write
// lock for longer than it would wait.
var ErrBusy = store.ErrBusy

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

// ckptEveryCommits is how many commits of a process with background
// checkpoints make a checkpoint due: a worker with 64 runs in flight
// commits about 50 WAL pages each time, one with 4 about 15, so a
// checkpoint copies some hundreds to a few thousand pages. Every 16
// commits copied more pages in all (a page changed in several commits
// is copied once per checkpoint); every 128 left more for the backstop.
const ckptEveryCommits = 48

// BackgroundCheckpoints moves this process's WAL checkpoints off its
// write path, for a long-lived writer (a worker): every
// ckptEveryCommits commits, a goroutine checkpoints on a connection of
// its own (PASSIVE: it never waits for a lock, and commits go on while
// it copies pages and syncs the files). SQLite's automatic checkpoint,
// which runs inside the COMMIT that crosses autoCheckpointPages and held
// that commit for the whole copy and its two fsyncs (tens of ms on this
// disk), stays as the backstop: with the WAL kept backfilled it finds
// little or nothing left to copy. stop ends the goroutine.
func (d *DB) BackgroundCheckpoints(ctx context.Context) (stop func(), err error) {
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return nil, err
	}
	due := make(chan struct{}, 1)
	quit, finished := make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	d.ckpt = due
	d.mu.Unlock()
	go func() {
		defer close(finished)
		for {
			select {
			case <-quit:
				return
			case <-due:
				_, _ = c.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(PASSIVE)")
			}
		}
	}()
	return func() {
		d.mu.Lock()
		d.ckpt = nil
		d.mu.Unlock()
		close(quit)
		<-finished
		_ = c.Close()
	}, nil
}

// ChangeWatch returns changed, which reports whether another connection
// (any process's) has committed to the store since its previous call, by
// PRAGMA data_version on a connection of its own; its first call reports
// true. stop gives the connection back. For pollers (cq wait) that need
// not read anything while the store stands still.
func (d *DB) ChangeWatch(ctx context.Context) (changed func() (bool, error), stop func(), err error) {
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	last := int64(-1)
	changed = func() (bool, error) {
		var v int64
		if err := c.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			return true, err
		}
		ch := v != last
		last = v
		return ch, nil
	}
	return changed, func() { _ = c.Close() }, nil
}

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

// writeCacheKiB is the page cache of the write connection, in KiB.
const writeCacheKiB = 8192

// autoCheckpointPages is the WAL size, in pages, from which a commit
// checkpoints it (SQLite's automatic checkpoint, run by the committing
// connection). A worker commits about a dozen pages per task, so at
// SQLite's 1000 it checkpointed every 70-odd tasks, and each checkpoint
// syncs the WAL and the database file on the worker's loop: on disk,
// cq's end-to-end rate followed the count (on tmpfs it matched the
// floor's). 4000 (a WAL of 16 MiB at most between checkpoints, beside the
// 64 MiB goal) made the worker faster end to end (docs/performance.md).
// A short command's TrimWAL still keeps
// the WAL at 1 MiB when no worker holds the store.
const autoCheckpointPages = 4000

// trimWALBytes is the WAL size from which TrimWAL checkpoints and
// truncates the WAL: about 250 frames, two dozen enqueues.
const trimWALBytes = 1 << 20

// TrimWAL checkpoints the WAL into the database file and truncates it,
// when it has grown past trimWALBytes, no long-lived process holds the
// store (see Hold) and no other connection is in the way (it never waits
// for one: busy means it is left for later). For a
// short-lived command on its way out: the first process to open a store
// that no other process holds reads the whole WAL to rebuild its index,
// so without this each short command paid for every frame written since
// the last restart of the WAL (docs/performance.md). The WAL's file stays, so the next process does not create it.
func (d *DB) TrimWAL(ctx context.Context) {
	fi, err := os.Stat(d.Path + "-wal")
	if err != nil || fi.Size() < trimWALBytes || held(d.Path) {
		return
	}
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return
	}
	_, _ = c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	_, _ = c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout/time.Millisecond))
}

// holdersPath is the file on which a long-lived process that keeps the
// store open holds a shared flock (see Hold).
func holdersPath(dbPath string) string { return dbPath + "-holders" }

// Hold marks this process, until release, as one that keeps the store
// open for long (a worker): a shared flock on the store's -holders file
// (created 0600). While one is held, the next command to open the store
// has no WAL to read through (the holder keeps the WAL index valid) and
// the holder's own checkpoints keep the WAL in bounds, so TrimWAL leaves
// the WAL to it.
func (d *DB) Hold() (release func(), err error) {
	l, err := fsutil.OpenLock(holdersPath(d.Path))
	if err != nil {
		return nil, err
	}
	if err := l.RLock(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return func() { _ = l.Close() }, nil
}

// held reports whether some process holds the store (see Hold): its
// -holders file exists and an exclusive flock on it cannot be had at
// once. Unknown counts as no.
func held(dbPath string) bool {
	l, err := fsutil.OpenExistingLock(holdersPath(dbPath))
	if err != nil {
		return false
	}
	defer l.Close()
	ok, err := l.TryLock()
	return err == nil && !ok
}

// Close closes the pool. Short-lived commands may skip it: leaving the
// connection open at exit keeps the WAL file for the next call instead of
// checkpointing and deleting it every time.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.wconn != nil {
		_ = d.wconn.Close()
		d.wconn = nil
	}
	d.mu.Unlock()
	return d.SQL.Close()
}

func wrapBusy(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked) {
		return busyError{err}
	}
	return err
}

// busyError says what a user can act on (another process kept the store
// locked past the busy timeout) rather than SQLite's "database is locked".
type busyError struct{ err error }

func (e busyError) Error() string {
	return fmt.Sprintf("store busy: another process held its write lock for more than %s; try again", busyTimeout)
}

func (e busyError) Unwrap() error { return e.err }

// IsConstraint reports whether err is a SQLite constraint violation.
func IsConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}
