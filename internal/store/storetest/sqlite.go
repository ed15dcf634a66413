package storetest

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

const sqliteName = "sqlite"

// SQLite is the SQLite backend: a database is a file cq.db in a folder of
// its own.
func SQLite() Backend {
	return Backend{
		Name: sqliteName,
		New:  func(t testing.TB) string { return filepath.Join(t.TempDir(), "cq.db") },
		Open: func(t testing.TB, addr string) store.Store { return openSQLite(t, addr).Store() },
		Schema: &Schema{
			Latest: sqlite.LatestVersion(),
			TryOpen: func(t testing.TB, addr string) (store.Store, error) {
				d, err := sqlite.Open(ctx, addr)
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = d.Close() })
				return d.Store(), nil
			},
			Make:       sqliteMake,
			Version:    sqliteVersion,
			SetVersion: sqliteSetVersion,
			Contents:   sqliteContents,
		},
	}
}

func openSQLite(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	d, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// rawSQLite opens the file at path with the driver alone: no migration,
// no check.
func rawSQLite(t testing.TB, path string) *sql.DB {
	t.Helper()
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	return raw
}

func rawExec(t testing.TB, raw *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// sqliteMake applies migrations 1 to v as cq did (WAL mode and incremental
// auto-vacuum first), then stores KeptData with columns every version has.
func sqliteMake(t testing.TB, path string, v int) {
	t.Helper()
	raw := rawSQLite(t, path)
	defer raw.Close()
	rawExec(t, raw, `PRAGMA auto_vacuum = INCREMENTAL`, `PRAGMA journal_mode = WAL`)
	for _, m := range sqlite.Migrations()[:v] {
		rawExec(t, raw, m.SQL, fmt.Sprintf(`PRAGMA user_version = %d`, m.Version))
	}
	at := "'" + KeptAt + "'"
	rawExec(t, raw,
		`INSERT INTO queues (name, created_at, updated_at) VALUES ('`+KeptID+`', `+at+`, `+at+`)`,
		`INSERT INTO events (at, kind, task_id, from_state, to_state) VALUES
			(`+at+`, 'task.created', '`+KeptID+`', NULL, 'inbox'), (`+at+`, 'task.done', '`+KeptID+`', 'inbox', 'done')`,
		`INSERT INTO tasks (id, state, queue, priority, seq, spec, created_at, updated_at, finished_at)
			VALUES ('`+KeptID+`', 'done', '`+KeptID+`', 1, 2, '{}', `+at+`, `+at+`, `+at+`)`,
		`INSERT INTO system_state (key, value, updated_at) VALUES ('`+KeptID+`', 'yes', `+at+`)`)
}

func sqliteVersion(t testing.TB, path string) int {
	t.Helper()
	raw := rawSQLite(t, path)
	defer raw.Close()
	var v int
	if err := raw.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func sqliteSetVersion(t testing.TB, path string, v int) {
	t.Helper()
	raw := rawSQLite(t, path)
	defer raw.Close()
	rawExec(t, raw, fmt.Sprintf(`PRAGMA user_version = %d`, v))
}

// sqliteContents is every file of the database's folder with its bytes.
// The -shm file is SQLite's shared-memory index, rebuilt by whoever opens
// the database; reading one in WAL mode creates it, and an empty -wal,
// neither holds data.
func sqliteContents(t testing.TB, path string) string {
	t.Helper()
	dir := filepath.Dir(path)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(e.Name()) == ".db-shm" || (len(b) == 0 && filepath.Ext(e.Name()) == ".db-wal") {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %d bytes, sha256 %x", e.Name(), len(b), sha256.Sum256(b)))
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}
