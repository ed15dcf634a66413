package postgres_test

import (
	"testing"

	"github.com/cq-dev/cq/internal/store/storetest"
)

// TestConformance holds the PostgreSQL backend to the store's contract
// (internal/store/storetest, docs/store.md), each test in a schema of its
// own on the tests' server; skipped, saying why, when there is none.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Postgres())
}
