package queue

import (
	"errors"
	"fmt"
)

// Code classifies an error the way the CLI reports it (docs/commands.md, Exit codes).
type Code int

// Error codes; their numbers are cq's exit codes.
const (
	CodeInvalid  Code = 1 // bad input, ambiguous prefix
	CodeConflict Code = 3 // lost CAS, illegal transition, unique key, id re-used
	CodeNotFound Code = 4 // unknown id, --after naming no task
)

// Error is a domain error with its class. Existing and ExistingState are
// set by a unique-key conflict to the task that holds the key and its
// state.
type Error struct {
	Code          Code
	Msg           string
	Existing      string
	ExistingState string
}

func (e *Error) Error() string { return e.Msg }

func invalidf(format string, a ...any) error {
	return &Error{Code: CodeInvalid, Msg: fmt.Sprintf(format, a...)}
}

func conflictf(format string, a ...any) error {
	return &Error{Code: CodeConflict, Msg: fmt.Sprintf(format, a...)}
}

func notFoundf(format string, a ...any) error {
	return &Error{Code: CodeNotFound, Msg: fmt.Sprintf(format, a...)}
}

// CodeOf returns the class of err: its Code if it is an *Error, else
// CodeInvalid (a general error, exit 1).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInvalid
}

// IsConflict reports whether err is a conflict (exit 3).
func IsConflict(err error) bool { return err != nil && CodeOf(err) == CodeConflict }

// IsNotFound reports whether err is a not-found error (exit 4).
func IsNotFound(err error) bool { return err != nil && CodeOf(err) == CodeNotFound }
