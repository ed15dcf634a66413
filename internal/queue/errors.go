package queue

import (
	"errors"
	"fmt"
)

// Kind classifies a domain error. The kinds are what callers branch on;
// which exit code each becomes is the command line's business.
type Kind int

// Error kinds. The zero Kind is none; KindOf calls an error of no kind
// Invalid, a general error.
const (
	Invalid  Kind = iota + 1 // bad input, ambiguous prefix
	Conflict                 // lost CAS, illegal transition, unique key, id re-used
	NotFound                 // unknown id, --after naming no task
)

// String names the kind, for messages and test output.
func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case Conflict:
		return "conflict"
	case NotFound:
		return "not found"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a domain error with its kind. Existing and ExistingState are
// set by a unique-key conflict to the task that holds the key and its
// state.
type Error struct {
	Kind          Kind
	Msg           string
	Existing      string
	ExistingState string
}

func (e *Error) Error() string { return e.Msg }

func invalidf(format string, a ...any) error {
	return &Error{Kind: Invalid, Msg: fmt.Sprintf(format, a...)}
}

func conflictf(format string, a ...any) error {
	return &Error{Kind: Conflict, Msg: fmt.Sprintf(format, a...)}
}

func notFoundf(format string, a ...any) error {
	return &Error{Kind: NotFound, Msg: fmt.Sprintf(format, a...)}
}

// KindOf returns the kind of err: its Kind if it is an *Error, else
// Invalid (a general error).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Invalid
}

// IsConflict reports whether err is a conflict.
func IsConflict(err error) bool { return err != nil && KindOf(err) == Conflict }

// IsNotFound reports whether err is a not-found error.
func IsNotFound(err error) bool { return err != nil && KindOf(err) == NotFound }
