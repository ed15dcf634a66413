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

// runPTY runs cq with stdin, stdout and stderr on one pseudo-terminal of
// cols×rows, as at an interactive shell, and returns all it wrote (with
// "\r\n" turned into "\n") and its exit code.
func runPTY(t *testing.T, env []string, dir string, cols, rows int, args ...string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = env, dir
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	defer f.Close()
	var buf bytes.Buffer
	read := make(chan struct{})
	// The read ends (EIO) once no process holds the terminal any more.
	go func() { _, _ = io.Copy(&buf, f); close(read) }()
	werr := cmd.Wait()
	select {
	case <-read:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		t.Fatalf("cq %s on a pty: did not end within 30s", strings.Join(args, " "))
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), werr)
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n"), code
}
