package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
)

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

// busyTimeout is how long a statement waits for another process's lock.
const busyTimeout = 30 * time.Second

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
