package sqlite

import (
	"errors"
	"strings"
	"testing"

	"github.com/mattn/go-sqlite3"
)

// TestBusyErrorSpeaksToTheUser: a lock held past the busy timeout is
// reported as such, never as SQLite's "database is locked"
// (docs/operations.md, The store), and the SQLite error stays reachable for callers that test for it.
func TestBusyErrorSpeaksToTheUser(t *testing.T) {
	t.Parallel()
	for _, code := range []sqlite3.ErrNo{sqlite3.ErrBusy, sqlite3.ErrLocked} {
		err := wrapBusy(sqlite3.Error{Code: code})
		if msg := err.Error(); strings.Contains(msg, "database is locked") || !strings.HasPrefix(msg, "store busy: another process held its write lock") {
			t.Errorf("code %v: %q", code, msg)
		}
		var se sqlite3.Error
		if !errors.As(err, &se) || !isBusy(err) {
			t.Errorf("code %v: the SQLite error is no longer reachable", code)
		}
	}
	other := errors.New("disk I/O error")
	if got := wrapBusy(other); !errors.Is(got, other) || got.Error() != other.Error() {
		t.Errorf("a non-busy error was rewrapped: %v", got)
	}
}
