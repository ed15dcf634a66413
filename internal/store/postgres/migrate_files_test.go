package postgres

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// TestMigrationFiles: the embedded migrations are named NNNN_short_name.sql,
// numbered 1, 2, 3, … with no gap and no number twice, and none is empty.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	files, err := readMigrations(mustSub(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if f.version != i+1 {
			t.Fatalf("%s has number %d, want %d", f.name, f.version, i+1)
		}
	}
	ms := Migrations()
	if len(ms) != len(files) || LatestVersion() != len(files) {
		t.Fatalf("Migrations() has %d, LatestVersion() = %d; %d files", len(ms), LatestVersion(), len(files))
	}
	for i, m := range ms {
		if m.Version != files[i].version || strings.TrimSpace(m.SQL) == "" {
			t.Errorf("%s: migration %d, %d bytes of SQL", files[i].name, m.Version, len(m.SQL))
		}
	}
}

// TestMigrationFilesChecked: a set of migration files with a gap, a number
// twice, one not starting at 1, or a name of another form is refused.
func TestMigrationFilesChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		why   string
		names []string
		want  string // in the error; "" for none
	}{
		{"in order", []string{"0001_a.sql", "0002_b_c.sql", "0003_x9.sql"}, ""},
		{"none", nil, "no migration files"},
		{"a gap", []string{"0001_a.sql", "0003_c.sql"}, "0003_c.sql: number 3, want 2"},
		{"twice", []string{"0001_a.sql", "0002_b.sql", "0002_c.sql"}, "0002_b.sql and 0002_c.sql have the same number"},
		{"not from 1", []string{"0002_b.sql"}, "number 2, want 1"},
		{"from 0", []string{"0000_a.sql", "0001_b.sql"}, "number 0, want 1"},
		{"three digits", []string{"001_a.sql"}, "want NNNN_short_name.sql"},
		{"no name", []string{"0001.sql"}, "want NNNN_short_name.sql"},
		{"empty name", []string{"0001_.sql"}, "want NNNN_short_name.sql"},
		{"a sign", []string{"+001_a.sql"}, "want NNNN_short_name.sql"},
		{"capitals", []string{"0001_Tables.sql"}, "want NNNN_short_name.sql"},
		{"not sql", []string{"0001_a.txt"}, "want NNNN_short_name.sql"},
	} {
		fsys := fstest.MapFS{}
		for _, n := range tc.names {
			fsys[n] = &fstest.MapFile{Data: []byte("SELECT 1;\n")}
		}
		_, err := readMigrations(fsys)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.why, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.why, err, tc.want)
		}
	}
}

func mustSub(t *testing.T) fs.FS {
	t.Helper()
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	return sub
}
