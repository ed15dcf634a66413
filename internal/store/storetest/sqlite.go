package storetest

import (
	"crypto/sha256"
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

// sqliteMake makes a store at schema version v holding KeptData.
func sqliteMake(t testing.TB, path string, v int) {
	t.Helper()
	if err := sqlite.MakeAtVersion(ctx, path, v, KeptID, KeptAt); err != nil {
		t.Fatal(err)
	}
}

func sqliteVersion(t testing.TB, path string) int {
	t.Helper()
	v, err := sqlite.SchemaVersion(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sqliteSetVersion(t testing.TB, path string, v int) {
	t.Helper()
	if err := sqlite.SetSchemaVersion(ctx, path, v); err != nil {
		t.Fatal(err)
	}
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
