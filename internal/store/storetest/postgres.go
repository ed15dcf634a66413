package storetest

import (
	"testing"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
)

const postgresName = "postgres"

// Postgres is the PostgreSQL backend: a database is a new schema of its
// own on the tests' server (pgtest), dropped at the end of the test. With
// no server, a test that asks for one is skipped, saying why.
func Postgres() Backend {
	return Backend{
		Name: postgresName,
		New:  func(t testing.TB) string { return pgtest.Schema(t) },
		Open: func(t testing.TB, addr string) store.Store {
			t.Helper()
			s, err := openPostgres(t, addr)
			if err != nil {
				t.Fatalf("open %s: %v", addr, err)
			}
			return s
		},
		Schema: &Schema{
			Latest:  postgres.LatestVersion(),
			TryOpen: openPostgres,
			Make: func(t testing.TB, addr string, v int) {
				t.Helper()
				if err := postgres.MakeAtVersion(ctx, addr, v, KeptID, KeptAt); err != nil {
					t.Fatal(err)
				}
			},
			Version: func(t testing.TB, addr string) int {
				t.Helper()
				v, err := postgres.SchemaVersion(ctx, addr)
				if err != nil {
					t.Fatal(err)
				}
				return v
			},
			SetVersion: func(t testing.TB, addr string, v int) {
				t.Helper()
				if err := postgres.SetSchemaVersion(ctx, addr, v); err != nil {
					t.Fatal(err)
				}
			},
			Contents: func(t testing.TB, addr string) string {
				t.Helper()
				c, err := pgtest.Contents(ctx, addr)
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
		},
	}
}

func openPostgres(t testing.TB, addr string) (store.Store, error) {
	d, err := postgres.Open(ctx, addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = d.Close() })
	return d.Store(), nil
}
