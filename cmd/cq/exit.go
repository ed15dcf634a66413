package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"golang.org/x/sys/unix"
)

// Exit codes (docs/commands.md, Exit codes). This file is the one place errors become
// exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitConflict = 3
	exitNotFound = 4
	exitTimeout  = 124
	// exitInterrupted marks a command that stopped because of SIGINT or
	// SIGTERM; execute turns it into 128 + the signal's number.
	exitInterrupted = -1
)

// exitErr carries an exit code; a silent one has already been reported.
type exitErr struct {
	code   int
	msg    string
	silent bool
}

func (e *exitErr) Error() string { return e.msg }

// silentExit ends the command with code, its messages already printed.
func silentExit(code int) error { return &exitErr{code: code, silent: true} }

// usageErr is a bad-usage error (exit 1).
func usageErr(format string, a ...any) error {
	return &exitErr{code: exitError, msg: fmt.Sprintf(format, a...)}
}

// codeOf maps any error to its exit code.
func codeOf(err error) int {
	var ee *exitErr
	if errors.As(err, &ee) {
		return ee.code
	}
	var qe *queue.Error
	if errors.As(err, &qe) {
		return exitCodeOf(qe.Kind)
	}
	if errors.Is(err, sqlite.ErrFutureSchema) || errors.Is(err, sqlite.ErrUnsupported) {
		return exitError
	}
	return exitError
}

// exitCodeOf is the exit code of a domain error of kind k.
func exitCodeOf(k queue.Kind) int {
	switch k {
	case queue.Conflict:
		return exitConflict
	case queue.NotFound:
		return exitNotFound
	}
	return exitError
}

// report prints err as one line on stderr, unless it is silent.
func report(w io.Writer, err error) {
	var ee *exitErr
	if errors.As(err, &ee) && ee.silent {
		return
	}
	fmt.Fprintln(w, "cq: "+errorText(err))
}

// errorText is err as one line, as cq reports it (without the "cq: "):
// on stderr, and in cq serve's JSON errors.
func errorText(err error) string {
	// A refused file says all there is in its own message (the path,
	// what it is, the rule); what was being done when it was met adds
	// nothing a user can act on.
	var ue *fsutil.UnsafeError
	if errors.As(err, &ue) {
		err = ue
	}
	return oneLine(err.Error())
}

// oneLine is msg as one line of stderr: a reason or a path given by a
// user may hold line breaks, and the driver lists the hosts it tried one
// per indented line; breaks and tabs become spaces.
func oneLine(msg string) string {
	return strings.NewReplacer("\r\n", " ", "\n\t", " ", "\n", " ", "\r", " ", "\t", " ").Replace(strings.TrimSpace(msg))
}

// multi runs fn for each id on its own, reports each failure on stderr,
// and returns the first failure's code (docs/commands.md, Exit codes).
func multi(stderr io.Writer, ids []string, fn func(id string) error) error {
	first := 0
	for _, id := range ids {
		if err := fn(id); err != nil {
			if errors.Is(err, context.Canceled) {
				// Interrupted: execute ends the command silently, and
				// the ids not yet reached are left alone.
				return err
			}
			report(stderr, err)
			if first == 0 {
				first = codeOf(err)
			}
		}
	}
	if first != 0 {
		return silentExit(first)
	}
	return nil
}

// exitBrokenPipe is how a shell reports a process killed by SIGPIPE.
const exitBrokenPipe = 128 + 13

// errOutputGone ends a --follow whose reader has gone: the exit status is
// the one a write to the closed pipe would have caused, with nothing said.
var errOutputGone = &exitErr{code: exitBrokenPipe, silent: true}

// outputGone reports whether w is a pipe or socket whose reading end has
// been closed (poll says POLLERR or POLLHUP). A --follow that writes
// nothing while it waits would otherwise never notice, and linger, after
// `cq events --follow | head -1` or a consumer's exit.
func outputGone(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(f.Fd())}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
