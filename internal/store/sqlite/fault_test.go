package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/mattn/go-sqlite3"
)

// TestExplain: SQLite's full and read-only errors, wrapped or not, become
// the store's faults in words naming its path; any other error is left
// as it is.
func TestExplain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cq.db")
	cases := []struct {
		name string
		err  error
		kind error // nil: unchanged
		says string
	}{
		{"full", sqlite3.Error{Code: sqlite3.ErrFull}, sqlite.ErrFull, "no space left on the device holding the store " + path},
		{"full wrapped", fmt.Errorf("insert: %w", sqlite3.Error{Code: sqlite3.ErrFull}), sqlite.ErrFull, "no space left"},
		{"ENOSPC from a write", sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.ENOSPC}, sqlite.ErrFull, "no space left"},
		{"ENOSPC from its file", fmt.Errorf("open: %w", &fs.PathError{Op: "open", Path: path, Err: syscall.ENOSPC}), sqlite.ErrFull, "no space left"},
		// Not the store's: a full disk under stdout, say.
		{"ENOSPC from another file", &fs.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}, nil, ""},
		{"ENOSPC alone", fmt.Errorf("write: %w", syscall.ENOSPC), nil, ""},
		{"read-only", sqlite3.Error{Code: sqlite3.ErrReadonly, ExtendedCode: sqlite3.ErrReadonlyCantLock}, sqlite.ErrReadOnly, "the store " + path + " is read-only: cannot write to it"},
		{"busy", sqlite3.Error{Code: sqlite3.ErrBusy}, nil, ""},
		{"constraint", sqlite3.Error{Code: sqlite3.ErrConstraint}, nil, ""},
		// The folder is writable: a file it cannot open is no read-only store.
		{"cannot open", sqlite3.Error{Code: sqlite3.ErrCantOpen}, nil, ""},
	}
	for _, c := range cases {
		got := sqlite.Explain(path, c.err)
		if c.kind == nil {
			if !errors.Is(got, c.err) || got.Error() != c.err.Error() {
				t.Errorf("%s: Explain gave %v, want the error unchanged", c.name, got)
			}
			continue
		}
		var fe *sqlite.FaultError
		if !errors.Is(got, c.kind) || !errors.As(got, &fe) || fe.Path != path || !strings.Contains(got.Error(), c.says) {
			t.Errorf("%s: Explain gave %q, want %v saying %q", c.name, got, c.kind, c.says)
		}
		if !errors.Is(got, c.err) && !errors.Is(got, errors.Unwrap(c.err)) {
			t.Errorf("%s: Explain lost the driver's error", c.name)
		}
	}
	if sqlite.Explain(path, nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

// TestCheckWritableWritesNothing: the probe of a writable store succeeds
// and leaves it as it was: no commit (data_version, seen by another
// connection, does not move) and the same schema version.
func TestCheckWritableWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cq.db")
	d := open(t, path)
	other := open(t, path)
	ctx := context.Background()
	dataVersion := func() int {
		var v int
		if err := other.SQL.QueryRow("PRAGMA data_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before, version := dataVersion(), userVersion(t, d.SQL)
	if err := d.CheckWritable(ctx); err != nil {
		t.Fatalf("CheckWritable on a writable store: %v", err)
	}
	if after := dataVersion(); after != before {
		t.Errorf("CheckWritable committed: data_version %d → %d", before, after)
	}
	if v := userVersion(t, d.SQL); v != version {
		t.Errorf("schema version %d → %d", version, v)
	}
}
