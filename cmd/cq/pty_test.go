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

// runPTY runs cq with its stdin, stdout and stderr on one pseudo-terminal
// of cols×rows, in dir with env, and returns all it wrote ("\r\n" read as
// "\n") and its exit code. A run that outlives its deadline fails the test.
func runPTY(t *testing.T, env []string, dir string, cols, rows int, args ...string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = env, dir
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("cq %v on a pty: %v", args, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	// Reading ends with EIO once the child has exited and closed its side.
	_, _ = io.Copy(&buf, f)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("cq %v on a pty did not end within its deadline; it wrote %q", args, buf.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("cq %v on a pty: %v", args, err)
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n"), cmd.ProcessState.ExitCode()
}
