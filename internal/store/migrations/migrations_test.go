package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

// TestCheck: a set of migration files with a gap, a number twice, one not
// starting at 1, or a name of another form is refused.
func TestCheck(t *testing.T) {
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
		err := Check(fsys)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.why, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.why, err, tc.want)
		}
	}
}

// TestSet: All reads each file's SQL in order of version, and Latest is
// the last number.
func TestSet(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("B")},
		"m/0001_a.sql": {Data: []byte("A")},
	}
	s := New(fsys, "m")
	if s.Latest() != 2 {
		t.Errorf("Latest = %d, want 2", s.Latest())
	}
	all := s.All()
	if len(all) != 2 || all[0] != (Migration{1, "A"}) || all[1] != (Migration{2, "B"}) {
		t.Errorf("All = %+v", all)
	}
}
