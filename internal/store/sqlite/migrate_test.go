package sqlite

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store/migrations"
)

// TestMigrationFiles: the embedded migrations are named NNNN_short_name.sql,
// numbered 1, 2, 3, … with no gap and no number twice, and none is empty.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(sub); err != nil {
		t.Fatal(err)
	}
	ms := Migrations()
	if len(ms) == 0 || LatestVersion() != len(ms) {
		t.Fatalf("Migrations() has %d, LatestVersion() = %d", len(ms), LatestVersion())
	}
	for i, m := range ms {
		if m.Version != i+1 || strings.TrimSpace(m.SQL) == "" {
			t.Errorf("migration %d: version %d, %d bytes of SQL", i+1, m.Version, len(m.SQL))
		}
	}
}
