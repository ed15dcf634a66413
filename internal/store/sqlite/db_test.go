package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
	_ "github.com/mattn/go-sqlite3"
)

func open(t *testing.T, path string) *sqlite.DB {
	t.Helper()
	d, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func userVersion(t *testing.T, q interface {
	QueryRow(string, ...any) *sql.Row
}) int {
	t.Helper()
	var v int
	if err := q.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func tables(t *testing.T, d *sqlite.DB) map[string]bool {
	t.Helper()
	rows, err := d.SQL.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		out[name] = true
	}
	return out
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ms := sqlite.Migrations()
	if len(ms) == 0 {
		t.Fatal("no migrations")
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %d has version %d: versions must be 1, 2, 3, … in order", i, m.Version)
		}
		if len(bytes.TrimSpace([]byte(m.SQL))) == 0 {
			t.Fatalf("migration %d is empty", m.Version)
		}
	}
	if sqlite.LatestVersion() != ms[len(ms)-1].Version {
		t.Fatalf("LatestVersion = %d, want %d", sqlite.LatestVersion(), ms[len(ms)-1].Version)
	}

	path := filepath.Join(t.TempDir(), "cq.db")
	d := open(t, path)
	if v := userVersion(t, d.SQL); v != sqlite.LatestVersion() {
		t.Fatalf("user_version = %d after Open, want %d", v, sqlite.LatestVersion())
	}
	have := tables(t, d)
	for _, want := range []string{"tasks", "task_deps", "runs", "events", "queues", "system_state"} {
		if !have[want] {
			t.Errorf("table %s missing after migrations (have %v)", want, have)
		}
	}
	var mode, fk string
	if err := d.SQL.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if err := d.SQL.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != "1" {
		t.Errorf("foreign_keys = %q, %v; want 1", fk, err)
	}

	// Opening an up-to-date database again applies nothing.
	if _, err := d.SQL.Exec(`INSERT INTO system_state (key, value, updated_at) VALUES ('marker', 'x', 'now')`); err != nil {
		t.Fatal(err)
	}
	d2 := open(t, path)
	var n int
	if err := d2.SQL.QueryRow(`SELECT COUNT(*) FROM system_state WHERE key = 'marker'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("reopening lost data: %d, %v", n, err)
	}
	if v := userVersion(t, d2.SQL); v != sqlite.LatestVersion() {
		t.Fatalf("user_version = %d after reopening, want %d", v, sqlite.LatestVersion())
	}
}

func TestMigrationsResumeFromAnOlderVersion(t *testing.T) {
	t.Parallel()
	ms := sqlite.Migrations()
	if len(ms) < 2 {
		t.Skip("only one migration: nothing to resume from")
	}
	path := filepath.Join(t.TempDir(), "cq.db")
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ms[0].SQL); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	d := open(t, path)
	if v := userVersion(t, d.SQL); v != sqlite.LatestVersion() {
		t.Fatalf("user_version = %d, want %d", v, sqlite.LatestVersion())
	}
}

// TestWriteConnectionCache: the connection writes go through has the
// larger page cache and the later automatic checkpoint; the others keep
// SQLite's defaults (they never commit).
func TestWriteConnectionCache(t *testing.T) {
	t.Parallel()
	d := open(t, filepath.Join(t.TempDir(), "cq.db"))
	var w, r, wc, rc int
	if err := d.Write(context.Background(), func(tx *sqlite.Tx) error {
		if err := tx.QueryRowContext(context.Background(), `PRAGMA cache_size`).Scan(&w); err != nil {
			return err
		}
		return tx.QueryRowContext(context.Background(), `PRAGMA wal_autocheckpoint`).Scan(&wc)
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.SQL.QueryRow(`PRAGMA cache_size`).Scan(&r); err != nil {
		t.Fatal(err)
	}
	if err := d.SQL.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&rc); err != nil {
		t.Fatal(err)
	}
	if w != -8192 || r != -2000 {
		t.Fatalf("cache_size: write connection %d, other %d; want -8192 and -2000", w, r)
	}
	if wc != 4000 || rc != 1000 {
		t.Fatalf("wal_autocheckpoint: write connection %d, other %d; want 4000 and 1000", wc, rc)
	}
}

// TestStateChecksHoldAfterTheirRewrite: migration 5 rewrites the CHECK
// on tasks.state and runs.state in the stored table definitions (an IN
// list became ORs of equalities). A store migrated from version 4 has the
// new text, reads clean under integrity_check, keeps its rows, and still
// refuses a state outside the list, on the migrating connection (the
// store's write connection) and on a new one.
func TestStateChecksHoldAfterTheirRewrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cq.db")
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range sqlite.Migrations()[:4] {
		if _, err := raw.Exec(m.SQL); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(`PRAGMA user_version = 4;
		INSERT INTO tasks (id, state, queue, priority, spec, created_at, updated_at) VALUES ('t1', 'todo', 'q', 2, '{}', 'now', 'now');
		INSERT INTO runs (id, task_id, attempt, state, queue, created_at) VALUES ('r1', 't1', 1, 'running', 'q', 'now')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	d := open(t, path)
	for _, table := range []string{"tasks", "runs"} {
		var def string
		if err := d.SQL.QueryRow(`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&def); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(def, "state IN (") || !strings.Contains(def, "CHECK (state = ") {
			t.Errorf("%s's state CHECK was not rewritten:\n%s", table, def)
		}
	}
	var ok string
	if err := d.SQL.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}
	bad := []string{`UPDATE tasks SET state = 'bogus' WHERE id = 't1'`, `UPDATE runs SET state = 'bogus' WHERE id = 'r1'`}
	for _, q := range bad {
		err := d.Write(context.Background(), func(tx *sqlite.Tx) error {
			_, err := tx.ExecContext(context.Background(), q)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
			t.Errorf("%s on the write connection: %v, want a CHECK failure", q, err)
		}
		if _, err := d.SQL.Exec(q); err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
			t.Errorf("%s on a new connection: %v, want a CHECK failure", q, err)
		}
	}
	var states string
	if err := d.SQL.QueryRow(`SELECT (SELECT state FROM tasks WHERE id = 't1') || '/' || (SELECT state FROM runs WHERE id = 'r1')`).Scan(&states); err != nil || states != "todo/running" {
		t.Fatalf("rows after the migration: %q, %v", states, err)
	}
}

// TestFutureSchemaIsRefusedUntouched: a database written by a newer cq is
// refused with ErrFutureSchema and left exactly as it was (docs/operations.md, The store).
func TestFutureSchemaIsRefusedUntouched(t *testing.T) {
	t.Parallel()
	// Each with incremental auto-vacuum as cq makes its stores, and
	// without: setting it again on every connection wrote page 1.
	for _, mode := range []string{"wal/incremental", "wal/none", "delete/incremental", "delete/none"} {
		journal, vacuum, _ := strings.Cut(mode, "/")
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			wantRefusedUntouched(t, t.TempDir(), "?_journal_mode="+journal+"&_auto_vacuum="+vacuum, sqlite.ErrFutureSchema, []string{
				`CREATE TABLE future (x TEXT)`,
				`INSERT INTO future VALUES ('from a newer cq')`,
				fmt.Sprintf(`PRAGMA user_version = %d`, sqlite.LatestVersion()+1),
			})
		})
	}
}

// TestForeignDatabaseIsRefusedUntouched: another application's SQLite file
// where cq.db should be, at version 0 with tables of its own or at an
// older cq version without cq's tables, is refused with ErrNotCq and left
// as it was, not migrated into a cq store.
func TestForeignDatabaseIsRefusedUntouched(t *testing.T) {
	t.Parallel()
	// A table of its own named as one of cq's does not make it a store.
	// At cq's latest version too: Open then reads no more than the version
	// and the table names (one statement), and must still say no.
	for _, version := range []int{0, 2, 3, sqlite.LatestVersion()} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			t.Parallel()
			wantRefusedUntouched(t, t.TempDir(), "", sqlite.ErrNotCq, []string{
				`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)`,
				`INSERT INTO notes (body) VALUES ('precious')`,
				`CREATE TABLE tasks (x)`,
				fmt.Sprintf(`PRAGMA user_version = %d`, version),
			})
		})
	}
}

// wantRefusedUntouched makes dir/cq.db with stmts (opened with the DSN
// query params), then requires sqlite.Open to refuse it with want and to
// leave the folder exactly as it was.
func wantRefusedUntouched(t *testing.T, dir, params string, want error, stmts []string) {
	t.Helper()
	path := filepath.Join(dir, "cq.db")
	raw, err := sql.Open("sqlite3", "file:"+path+params)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	before := dirFiles(t, dir)
	d, err := sqlite.Open(context.Background(), path)
	if err == nil {
		d.Close()
		t.Fatalf("Open accepted the database; want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("Open: %v; want %v", err, want)
	}
	if after := dirFiles(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("Open changed a database it refused:\nbefore %v\nafter  %v", summary(before), summary(after))
	}
}

// dirFiles reads every file of dir: name → contents. An empty -wal or
// -shm left behind by SQLite holds no data and is not counted.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 && e.Name() != "cq.db" {
			continue
		}
		// The -shm file is SQLite's shared-memory index, rebuilt from the
		// database and its WAL by whoever opens them; reading a WAL database
		// creates it. It holds no data, so it is not part of "untouched".
		if filepath.Ext(e.Name()) == ".db-shm" || e.Name() == "cq.db-shm" {
			continue
		}
		out[e.Name()] = string(b)
	}
	return out
}

func summary(files map[string]string) map[string]string {
	out := map[string]string{}
	for name, b := range files {
		s := fmt.Sprintf("%d bytes", len(b))
		if name == "cq.db" && len(b) >= 100 {
			s += fmt.Sprintf(", header bytes 18-19 (journal versions) = %d %d", b[18], b[19])
		}
		out[name] = s
	}
	return out
}

// TestFilesArePrivateWhateverTheUmask: cq.db, -wal and -shm are 0600 even
// under umask 0 (docs/operations.md, Home and files), for a new store and for an empty
// database file made beforehand with another mode (touch), which cq takes
// as a new store: SQLite would give the -wal and -shm files its mode. A
// store with content keeps its mode, but not its -wal and -shm. It
// changes the process umask, so it must not run beside other tests (no
// t.Parallel).
func TestFilesArePrivateWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })

	for _, before := range []string{"no file", "an empty 0666 file", "a 0644 store"} {
		path := filepath.Join(t.TempDir(), "cq.db")
		switch before {
		case "an empty 0666 file":
			if err := os.WriteFile(path, nil, 0o666); err != nil {
				t.Fatal(err)
			}
		case "a 0644 store":
			// A store copied in with another mode keeps it; its -wal and
			// -shm, which cq makes, are private all the same.
			open(t, path).Close()
			for _, side := range []string{"-wal", "-shm"} {
				if err := os.Remove(path + side); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		d := open(t, path)
		// A write makes sure the WAL and its index exist while d is open.
		if _, err := d.SQL.Exec(`INSERT INTO system_state (key, value, updated_at) VALUES ('k', 'v', 'now')`); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{path, path + "-wal", path + "-shm"} {
			st, err := os.Stat(name)
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(name), err)
			}
			if name == path && before == "a 0644 store" {
				if perm := st.Mode().Perm(); perm != 0o644 {
					t.Errorf("the copied store's mode became %#o, want its own 0644", perm)
				}
				continue
			}
			if perm := st.Mode().Perm(); perm != 0o600 {
				t.Errorf("from %s: %s has mode %#o under umask 0, want 0600", before, filepath.Base(name), perm)
			}
		}
	}
}

// TestConcurrentOpenOfANewPath: several processes starting at once on a
// new home create and migrate it safely (docs/operations.md). Each goroutine
// has its own pool, so they contend through SQLite's file locks as
// separate processes would.
func TestConcurrentOpenOfANewPath(t *testing.T) {
	t.Parallel()
	for round := 0; round < 5; round++ {
		path := filepath.Join(t.TempDir(), "cq.db")
		const n = 16
		start := make(chan struct{})
		errs := make([]error, n)
		dbs := make([]*sqlite.DB, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				dbs[i], errs[i] = sqlite.Open(context.Background(), path)
				if errs[i] == nil {
					var c int
					errs[i] = dbs[i].SQL.QueryRow(`SELECT COUNT(*) FROM tasks`).Scan(&c)
				}
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: opener %d: %v", round, i, err)
			}
		}
		for _, d := range dbs {
			if d != nil {
				if v := userVersion(t, d.SQL); v != sqlite.LatestVersion() {
					t.Errorf("user_version = %d, want %d", v, sqlite.LatestVersion())
				}
				// Whichever opener made the file, it has incremental
				// auto-vacuum (cq cleanup gives pages back with it).
				var av int
				if err := d.SQL.QueryRow(`PRAGMA auto_vacuum`).Scan(&av); err != nil || av != 2 {
					t.Errorf("auto_vacuum = %d (%v), want 2 (incremental)", av, err)
				}
				d.Close()
			}
		}
		if t.Failed() {
			return
		}
	}
}

// TestOpeningAStoreWritesNothing: opening an up-to-date store and reading
// from it neither writes (the WAL stays as it was) nor waits for the
// write lock, which another process may hold for a long batch.
func TestOpeningAStoreWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cq.db")
	first, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// Another writer holds the write lock until the reads below are done.
	conn, err := first.SQL.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), `ROLLBACK`) }()
	walBefore := fileSize(t, path+"-wal")

	for i := 0; i < 3; i++ {
		// Well below the busy timeout: a wait for the lock fails here.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := sqlite.Open(ctx, path)
		if err != nil {
			cancel()
			t.Fatalf("open %d beside a writer: %v", i, err)
		}
		var c int
		err = d.SQL.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&c)
		cancel()
		d.Close()
		if err != nil {
			t.Fatalf("read %d beside a writer: %v", i, err)
		}
	}
	if after := fileSize(t, path+"-wal"); after != walBefore {
		t.Errorf("the WAL went from %d to %d bytes: opening and reading wrote to the store", walBefore, after)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestPathFromURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"sqlite:///var/cq.db", "/var/cq.db", nil},
		{"sqlite:rel.db", "rel.db", nil},
		{"/abs/cq.db", "/abs/cq.db", nil},
		{"postgres://u@h/db", "", sqlite.ErrUnsupported},
		{"postgresql://u@h/db", "", sqlite.ErrUnsupported},
		{"mysql://u@h/db", "", sqlite.ErrUnsupported},
	} {
		got, err := sqlite.PathFromURL(c.in)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("PathFromURL(%q) = %q, %v; want %v", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("PathFromURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// walStore is a store with a table filler, no checkpoint run yet, and
// ways to grow its WAL and read its size.
type walStore struct {
	t    *testing.T
	d    *sqlite.DB
	path string
}

func newWALStore(t *testing.T) *walStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cq.db")
	w := &walStore{t: t, d: open(t, path), path: path}
	w.write(`CREATE TABLE filler (v BLOB)`)
	return w
}

func (w *walStore) write(q string) {
	w.t.Helper()
	ctx := context.Background()
	if err := w.d.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.ExecContext(ctx, q)
		return err
	}); err != nil {
		w.t.Fatal(err)
	}
}

// fill inserts rows of 3000 bytes, one transaction each.
func (w *walStore) fill(rows int) {
	w.t.Helper()
	for range rows {
		w.write(`INSERT INTO filler VALUES (randomblob(3000))`)
	}
}

func (w *walStore) walSize() int64 {
	w.t.Helper()
	fi, err := os.Stat(w.path + "-wal")
	if err != nil {
		w.t.Fatal(err)
	}
	return fi.Size()
}

// TestTrimWAL: past the threshold, TrimWAL checkpoints and truncates the
// WAL and loses nothing; with another connection inside a read
// transaction it gives up at once (busy) instead of waiting, and leaves
// the WAL as it was; under the threshold it does nothing.
func TestTrimWAL(t *testing.T) {
	ctx := context.Background()
	w := newWALStore(t)
	d, path, walSize, fill := w.d, w.path, w.walSize, w.fill
	count := func() int {
		t.Helper()
		var n int
		if err := d.SQL.QueryRow(`SELECT count(*) FROM filler`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	fill(10)
	before := walSize()
	d.TrimWAL(ctx)
	if got := walSize(); got != before || got == 0 {
		t.Fatalf("under the threshold: WAL %d bytes after TrimWAL, want it untouched at %d", got, before)
	}

	fill(400) // well past 1 MiB of WAL
	if walSize() < 1<<20 {
		t.Fatalf("WAL only %d bytes after 400 inserts of 3000 bytes", walSize())
	}
	// Another process's connection in a read transaction: busy at once.
	other, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	rtx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rtx.QueryRow(`SELECT count(*) FROM filler`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	held := walSize()
	done := make(chan struct{})
	go func() { d.TrimWAL(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("TrimWAL waited for the reader instead of giving up")
	}
	if got := walSize(); got != held {
		t.Errorf("with a reader: WAL %d bytes after TrimWAL, want %d (left for later)", got, held)
	}
	_ = rtx.Rollback()

	d.TrimWAL(ctx)
	if got := walSize(); got != 0 {
		t.Errorf("WAL %d bytes after TrimWAL with no one in the way, want 0", got)
	}
	if got := count(); got != 410 {
		t.Errorf("%d rows after the trim, want 410", got)
	}
	// A fresh pool (a new process) sees every row.
	d2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d2.SQL.QueryRow(`SELECT count(*) FROM filler`).Scan(&n); err != nil || n != 410 {
		t.Errorf("reopened: %d rows (%v), want 410", n, err)
	}
}

// TestTrimWALLeavesAHeldStore: while a long-lived process holds the store
// (Hold, as a worker does), TrimWAL leaves the WAL alone even past the
// threshold; once it is released, TrimWAL trims. The holders file is
// private.
func TestTrimWALLeavesAHeldStore(t *testing.T) {
	ctx := context.Background()
	w := newWALStore(t)
	d, path, walSize := w.d, w.path, w.walSize
	w.fill(400)
	before := walSize()
	if before < 1<<20 {
		t.Fatalf("WAL only %d bytes after 400 inserts of 3000 bytes", before)
	}
	release, err := d.Hold()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-holders"); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("holders file mode %v, want 0600", fi.Mode().Perm())
	}
	d.TrimWAL(ctx)
	if got := walSize(); got != before {
		t.Errorf("store held: WAL %d bytes after TrimWAL, want it left at %d", got, before)
	}
	release()
	d.TrimWAL(ctx)
	if got := walSize(); got != 0 {
		t.Errorf("store released: WAL %d bytes after TrimWAL, want 0", got)
	}
}

// TestBatchRows checks that rows added to a transaction are written at its
// commit in the order they were added (across batches and past the rows of
// one statement), that a savepoint's rollback drops the rows added after
// it and keeps those before, and that a failed transaction writes none.
func TestBatchRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, filepath.Join(t.TempDir(), "cq.db"))
	if _, err := d.SQL.Exec(`CREATE TABLE log (n INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL, src TEXT)`); err != nil {
		t.Fatal(err)
	}
	a := sqlite.NewBatch(`INSERT INTO log (v, src) VALUES `, 2)
	b := sqlite.NewBatch(`INSERT INTO log (v) VALUES `, 1)
	var want []string
	err := d.Write(ctx, func(tx *sqlite.Tx) error {
		add := func(bt *sqlite.Batch, v string) {
			t.Helper()
			vals := []any{v}
			if bt == a {
				vals = append(vals, "a")
			}
			if err := tx.Add(bt, vals...); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 150 { // more than one statement's rows
			add(a, fmt.Sprint("a", i))
			want = append(want, fmt.Sprint("a", i))
		}
		add(b, "b0")
		add(a, "a-after-b")
		want = append(want, "b0", "a-after-b")
		if err := tx.Savepoint("sp"); err != nil {
			return err
		}
		add(a, "dropped1")
		add(b, "dropped2") // flushes dropped1: SQLite undoes it
		add(b, "dropped3") // still pending: dropped by RollbackTo
		if err := tx.RollbackTo("sp"); err != nil {
			return err
		}
		add(b, "kept")
		want = append(want, "kept")
		return tx.Release("sp")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(ctx, func(tx *sqlite.Tx) error {
		if err := tx.Add(a, "never", "a"); err != nil {
			return err
		}
		return errors.New("fail on purpose")
	}); err == nil {
		t.Fatal("the failing transaction reported no error")
	}
	if err := d.Write(ctx, func(tx *sqlite.Tx) error { return tx.Add(a, "one value") }); err == nil {
		t.Fatal("a row with too few values was accepted")
	}
	rows, err := d.SQL.Query(`SELECT n, v FROM log ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	last := int64(0)
	for rows.Next() {
		var n int64
		var v string
		if err := rows.Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		if n != last+1 {
			t.Fatalf("row %q has n %d after %d: rowids are not consecutive", v, n, last)
		}
		last = n
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows written:\n%q\nwant:\n%q", got, want)
	}
}

// TestExecMany: a statement run through ExecMany writes what ExecContext
// would, its Result gives the rows it changed and the last rowid it
// inserted, and a constraint it breaks is its error, with nothing of it
// kept.
func TestExecMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, filepath.Join(t.TempDir(), "cq.db"))
	if _, err := d.SQL.Exec(`CREATE TABLE kv (n INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT NOT NULL UNIQUE, v INTEGER, note TEXT)`); err != nil {
		t.Fatal(err)
	}
	err := d.Write(ctx, func(tx *sqlite.Tx) error {
		res, err := tx.ExecMany(ctx, `INSERT INTO kv (k, v, note) VALUES (?, ?, ?), (?, ?, ?), (?, ?, ?)`,
			"a", 1, nil, "b", int64(2), "two", "c", 3, "")
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 3 {
			t.Errorf("insert: %d rows affected, want 3", n)
		}
		if id, _ := res.LastInsertId(); id != 3 {
			t.Errorf("insert: last id %d, want 3", id)
		}
		res, err = tx.ExecMany(ctx, `UPDATE kv SET v = v * 10 WHERE k IN (?, ?, ?) AND v < ?`, "a", "b", "zz", 100)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 2 {
			t.Errorf("update: %d rows affected, want 2", n)
		}
		if _, err := tx.ExecMany(ctx, `INSERT INTO kv (k) VALUES (?), (?)`, "d", "a"); err == nil {
			t.Error("a duplicate key was accepted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := d.SQL.Query(`SELECT k, v, COALESCE(note, 'NULL') FROM kv ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, note string
		var v int
		if err := rows.Scan(&k, &v, &note); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%d:%s", k, v, note))
	}
	if want := []string{"a=10:NULL", "b=20:two", "c=3:"}; !slices.Equal(got, want) {
		t.Errorf("rows: %q, want %q (the failed insert keeps nothing)", got, want)
	}
}

// TestBackgroundCheckpoints: with background checkpoints, the pages a
// process commits reach the database file while the WAL is far below
// SQLite's automatic checkpoint (which alone leaves them in the WAL);
// after stop, commits go on and no checkpoint runs for them.
func TestBackgroundCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	commitBlobs := func(d *sqlite.DB, n int) {
		t.Helper()
		for i := range n {
			if err := d.Write(ctx, func(tx *sqlite.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO blobs (b) VALUES (randomblob(3000))`)
				return err
			}); err != nil {
				t.Fatalf("commit %d: %v", i, err)
			}
		}
	}
	size := func(path string) int64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	setup := func(name string) (*sqlite.DB, string, int64) {
		t.Helper()
		path := filepath.Join(dir, name)
		d := open(t, path)
		if _, err := d.SQL.Exec(`CREATE TABLE blobs (b BLOB); PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		return d, path, size(path)
	}

	// Without: 200 commits of one page each stay in the WAL.
	plain, plainPath, before := setup("plain.db")
	commitBlobs(plain, 200)
	if got := size(plainPath); got != before {
		t.Fatalf("without background checkpoints the database file grew from %d to %d bytes: the check below proves nothing", before, got)
	}

	d, path, before := setup("bg.db")
	stop, err := d.BackgroundCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commitBlobs(d, 200)
	deadline := time.Now().Add(30 * time.Second)
	for size(path) < before+100*3000 {
		if time.Now().After(deadline) {
			t.Fatalf("with background checkpoints the database file is %d bytes after 200 commits of 3000 bytes (was %d)", size(path), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	commitBlobs(d, 60) // no checkpointer is told any more: nothing hangs
}

// TestChangeWatch: changed says true at first, then false until another
// connection commits, then true once.
func TestChangeWatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cq.db")
	d, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	changed, stop, err := d.ChangeWatch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	want := func(step string, w bool) {
		t.Helper()
		if got, err := changed(); err != nil || got != w {
			t.Fatalf("%s: changed() = %v, %v; want %v", step, got, err, w)
		}
	}
	want("first call", true)
	want("nothing committed", false)
	if err := d.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.ExecContext(context.Background(), `INSERT INTO system_state (key, value, updated_at) VALUES ('k', 'v', 'now')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want("after a commit", true)
	want("nothing since", false)
}
