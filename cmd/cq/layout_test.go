package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestInternalPackagesLeaveTheProcessToCmd checks the rules that keep
// cmd/cq the one place where a process is shaped: no package under
// internal/ has an init function (importing it must not change the
// process), imports cobra, calls os.Exit or writes to os.Stdout; and the
// layers import one way, worker → maintenance → queue → store, and
// none of them imports a backend (internal/store/sqlite): only cmd/cq
// chooses and opens one.
func TestInternalPackagesLeaveTheProcessToCmd(t *testing.T) {
	const module = "github.com/cq-dev/cq/"
	// A layer may import only the layers after it in this list.
	layers := []string{"internal/worker", "internal/maintenance", "internal/queue", "internal/store"}
	rank := func(dir string) int {
		for i, l := range layers {
			if dir == l {
				return i
			}
		}
		return -1
	}
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/spf13/cobra") {
				t.Errorf("%s imports %s: only cmd/cq builds commands", rel, p)
			}
			if from, to := rank(dir), rank(strings.TrimPrefix(p, module)); from >= 0 && to >= 0 && to <= from {
				t.Errorf("%s imports %s: the layers import one way, %s", rel, p, strings.Join(layers, " → "))
			}
			if rank(dir) >= 0 && strings.HasPrefix(p, module+"internal/store/") {
				t.Errorf("%s imports %s: the domain works on internal/store's interface, whatever the backend", rel, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv == nil && n.Name.Name == "init" {
					t.Errorf("%s: func init in a library package: a process-wide setting belongs in cmd/cq", rel)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "os" && (n.Sel.Name == "Exit" || n.Sel.Name == "Stdout") {
					t.Errorf("%s: os.%s in a library package: only cmd/cq ends the process or prints", rel, n.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked %d files under internal/, want the whole tree", checked)
	}
}

// sqlText matches the statements SQL is written with.
var sqlText = regexp.MustCompile(`(?i)\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|PRAGMA\s)`)

// TestSQLStaysInTheBackend: no SQL text, database/sql or database driver
// outside the backends (internal/store/sqlite, internal/store/postgres
// and its test helpers) in the code cq is built from, so that another
// backend is one more package beside them. bench/ is left out: its floor
// programs measure SQLite itself.
func TestSQLStaysInTheBackend(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch rel {
			case ".git", "bench", "internal/store/sqlite", "internal/store/postgres":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "database/sql" || strings.HasPrefix(p, "github.com/mattn/go-sqlite3") || strings.HasPrefix(p, "github.com/jackc/") {
				t.Errorf("%s imports %s: only the backend speaks to the database", rel, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && sqlText.MatchString(lit.Value) {
				t.Errorf("%s: SQL outside the backend: %.60s", rel, lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 60 {
		t.Fatalf("checked %d files, want the whole tree", checked)
	}
}
