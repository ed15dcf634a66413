package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// runPTY runs cq with args in dir, its stdin, stdout and stderr on one
// pseudo-terminal of cols × rows, and returns all it wrote there (with
// "\r\n" as "\n") and its exit code. The run is bounded by a deadline.
func runPTY(t *testing.T, env []string, dir string, cols, rows int, args ...string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = env, dir
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	defer f.Close()
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() {
		// Ends with EIO once every process holding the terminal is gone.
		_, _ = io.Copy(&buf, f)
		close(copied)
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	select {
	case <-copied:
	case <-ctx.Done():
		t.Fatalf("cq %s on a pty: its output did not end within the deadline", strings.Join(args, " "))
	}
	if ctx.Err() != nil {
		t.Fatalf("cq %s on a pty: did not end within the deadline", strings.Join(args, " "))
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n"), cmd.ProcessState.ExitCode()
}
