package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cq-dev/cq/internal/queue"
)

// TestCodeOfMapsErrorKinds: the domain says what kind of error it met,
// and this is the one place a kind becomes cq's documented exit code.
func TestCodeOfMapsErrorKinds(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&queue.Error{Kind: queue.Invalid, Msg: "bad"}, exitError},
		{&queue.Error{Kind: queue.Conflict, Msg: "lost"}, exitConflict},
		{&queue.Error{Kind: queue.NotFound, Msg: "gone"}, exitNotFound},
		{fmt.Errorf("line 2: %w", &queue.Error{Kind: queue.NotFound, Msg: "gone"}), exitNotFound},
		{&queue.Error{Msg: "no kind"}, exitError},
		{errors.New("plain"), exitError},
		{usageErr("bad flag"), exitError},
	} {
		if got := codeOf(c.err); got != c.want {
			t.Errorf("codeOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if exitConflict != 3 || exitNotFound != 4 {
		t.Errorf("exit codes conflict %d, not found %d; docs/commands.md says 3 and 4", exitConflict, exitNotFound)
	}
}
