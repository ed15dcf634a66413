// Package storetest is the conformance suite of cq's store: Run holds a
// backend to the contract written in the doc comments of internal/store,
// and Open and OpenSQLite give the domain's tests their store, of the
// backend $CQ_TEST_DB chooses (docs/store.md, The conformance suite).
//
// A backend joins by providing a Backend: how to make a new database and
// open it (and, for the migration tests, a few hooks on its schema
// version). Its package's tests then call Run.
package storetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Backend is what the suite needs of a backend.
type Backend struct {
	// Name names the backend in messages.
	Name string
	// New makes a new, empty database and returns its address: what Open
	// takes (a file path, a URL). It is removed at the end of t.
	New func(t testing.TB) string
	// Open opens the database at addr as cq does, migrating its schema,
	// and fails t when it cannot. The store is closed at the end of t.
	// Processes started by the suite call it too, on the same address.
	Open func(t testing.TB, addr string) store.Store
	// Schema holds the hooks of the migration tests; nil skips them.
	Schema *Schema
}

// Schema is what the migration tests need of a backend: reading and
// setting a database's schema version, and making one at an older version,
// all without migrating it.
type Schema struct {
	// Latest is the schema version this build writes.
	Latest int
	// TryOpen is Open returning its error instead of failing t.
	TryOpen func(t testing.TB, addr string) (store.Store, error)
	// Make turns the new database at addr (from New) into one at schema
	// version v (1 ≤ v ≤ Latest), as the cq of that version left it,
	// holding the kept data (see KeptID).
	Make func(t testing.TB, addr string, v int)
	// Version reads the schema version of the database at addr.
	Version func(t testing.TB, addr string) int
	// SetVersion records v as the schema version of the database at
	// addr, and changes nothing else (the suite sets a newer cq's).
	SetVersion func(t testing.TB, addr string, v int)
	// Contents is everything stored at addr, in any form that tells two
	// states apart: the suite compares it before and after a refusal.
	Contents func(t testing.TB, addr string) string
}

// KeptID and KeptAt describe what Schema.Make stores, in the schema of
// its version, for the migration tests to find after migrating: a queue
// KeptID with default settings; a task KeptID in it, done, priority 1,
// spec "{}", created, updated and finished at KeptAt, no key, seq 2; its
// events task.created (none to inbox) and task.done (inbox to done), both
// at KeptAt; and the system_state value KeptID = "yes", set at KeptAt.
const (
	KeptID = "kept"
	KeptAt = "2020-01-02T03:04:05.000Z"
)

// Backends lists the backends this build has.
func Backends() []Backend {
	return []Backend{SQLite(), Postgres()}
}

// EnvDB is the variable that chooses the backend of the domain's tests,
// as it chooses the database of cq's command-line test scripts: unset (or
// a sqlite: URL) is SQLite, each test with a new file of its own;
// "postgres" is PostgreSQL on the tests' server (pgtest: $CQ_TEST_PG_URL,
// else the local one), each test in a new schema of its own.
const EnvDB = "CQ_TEST_DB"

// Chosen is the backend $CQ_TEST_DB chooses; it fails t when this build
// has no backend for it.
func Chosen(t testing.TB) Backend {
	t.Helper()
	v := os.Getenv(EnvDB)
	switch {
	case v == "", v == "sqlite", strings.HasPrefix(v, "sqlite:"):
		return SQLite()
	case v == postgresName:
		return Postgres()
	}
	t.Fatalf("$%s=%s: this build has no store backend for it (it has %s)", EnvDB, v, names(Backends()))
	return Backend{}
}

func names(bs []Backend) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.Name)
	}
	return strings.Join(s, ", ")
}

// Open is a new, empty store of the chosen backend, closed at the end of
// t.
func Open(t testing.TB) store.Store {
	t.Helper()
	b := Chosen(t)
	return b.Open(t, b.New(t))
}

// OpenSQLite is a new store for a test that needs SQLite's own handle (to
// poke SQL as a fixture, reopen the file, read plans): the file cq.db in
// dir, or in a new folder of t's when dir is "". Closed at the end of t.
// When $CQ_TEST_DB chooses another backend, t is skipped.
func OpenSQLite(t testing.TB, dir string) *sqlite.DB {
	t.Helper()
	NeedSQLite(t)
	if dir == "" {
		dir = t.TempDir()
	}
	return openSQLite(t, filepath.Join(dir, "cq.db"))
}

// NeedSQLite skips t unless $CQ_TEST_DB chooses SQLite: for a test that
// needs SQLite's own handle, or builds a SQLite file itself.
func NeedSQLite(t testing.TB) {
	t.Helper()
	if b := Chosen(t); b.Name != sqliteName {
		t.Skipf("needs SQLite; $%s chooses %s", EnvDB, b.Name)
	}
}

// ctx is the context of the suite's calls.
var ctx = context.Background()
