package storetest

import (
	"regexp"
	"strings"
	"testing"
)

// TestRunPattern: a child's -test.run pattern selects its test alone,
// whatever characters the names hold.
func TestRunPattern(t *testing.T) {
	name := "TestConformance/a.b+(c)/Race/processes"
	pat := runPattern(name)
	parts := strings.Split(pat, "/")
	names := strings.Split(name, "/")
	for i, p := range parts {
		re := regexp.MustCompile(p)
		if !re.MatchString(names[i]) {
			t.Errorf("%s does not match %s", p, names[i])
		}
		for _, other := range []string{names[i] + "x", "x" + names[i], strings.ReplaceAll(names[i], ".", "x")} {
			if other != names[i] && re.MatchString(other) {
				t.Errorf("%s matches %s too", p, other)
			}
		}
	}
}

// TestChosen: no $CQ_TEST_DB, or a sqlite: one, is SQLite.
func TestChosen(t *testing.T) {
	for _, v := range []string{"", "sqlite", "sqlite:///tmp/x.db", "sqlite:x.db"} {
		t.Setenv(EnvDB, v)
		if b := Chosen(t); b.Name != "sqlite" {
			t.Errorf("$%s=%q chooses %q", EnvDB, v, b.Name)
		}
	}
	t.Setenv(EnvDB, "")
	if s := Open(t); s == nil {
		t.Fatal("Open gave no store")
	}
	if d := OpenSQLite(t, t.TempDir()); d == nil || !strings.HasSuffix(d.Path, "/cq.db") {
		t.Fatalf("OpenSQLite: %v", d)
	}
}
