package sqlite_test

import (
	"testing"

	"github.com/cq-dev/cq/internal/store/storetest"
)

// TestConformance holds the SQLite backend to the store's contract
// (internal/store/storetest, docs/store.md).
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.SQLite())
}
