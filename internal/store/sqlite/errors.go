package sqlite

import (
	"errors"
	"fmt"

	"github.com/cq-dev/cq/internal/store"
	"github.com/mattn/go-sqlite3"
)

// ErrFutureSchema means the database was written by a newer cq; it is
// refused and left untouched.
var ErrFutureSchema = store.ErrFutureSchema

// ErrNotCq means the database file belongs to another application; it is
// left untouched.
var ErrNotCq = errors.New("not a cq store")

// ErrUnsupported means the URL names a backend this build cannot use yet.
var ErrUnsupported = store.ErrUnsupported

// ErrBusy is WriteWithin's answer when another connection held the write
// lock for longer than it would wait.
var ErrBusy = store.ErrBusy

func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

func wrapBusy(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked) {
		return busyError{err}
	}
	return err
}

// busyError says what a user can act on (another process kept the store
// locked past the busy timeout) rather than SQLite's "database is locked".
type busyError struct{ err error }

func (e busyError) Error() string {
	return fmt.Sprintf("store busy: another process held its write lock for more than %s; try again", busyTimeout)
}

func (e busyError) Unwrap() error { return e.err }

// IsConstraint reports whether err is a SQLite constraint violation.
func IsConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}
