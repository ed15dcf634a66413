package postgres

import (
	"errors"
	"fmt"

	"github.com/cq-dev/cq/internal/store"
)

// ErrBadURL is what every refused database URL is (errors.Is): a
// parameter cq does not know, two that contradict each other, a list of
// URLs that disagree, or a URL that does not parse. It is found before
// anything is connected to; the user fixes the URL.
var ErrBadURL = errors.New("invalid database URL")

// URLError says which parameter of which URL was refused, and why. It
// never quotes a value: a URL may hold a password.
type URLError struct {
	// N is the URL's place in a list, from 1; 0 when one URL was given.
	N int
	// Key is the parameter refused; "" when the URL as a whole is.
	Key string
	// Why says what is wrong, in words a user can act on.
	Why string
}

func (e *URLError) Error() string {
	where := "database URL"
	if e.N > 0 {
		where = fmt.Sprintf("database URL %d", e.N)
	}
	if e.Key == "" {
		return where + ": " + e.Why
	}
	return fmt.Sprintf("%s: parameter %q: %s", where, e.Key, e.Why)
}

// Unwrap makes every URLError an ErrBadURL.
func (e *URLError) Unwrap() error { return ErrBadURL }

// ErrFutureSchema means the schema was written by a newer cq; it is
// refused and left untouched.
var ErrFutureSchema = store.ErrFutureSchema

// ErrNotCq means the schema cq was pointed at holds another
// application's objects and no cq version table; it is left untouched.
var ErrNotCq = errors.New("not a cq schema")
