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
// cols×rows, reads all it prints until it exits (30s at most), and returns
// that output with "\r\n" as "\n", and the exit code.
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
	// Reading ends with EIO once cq, the terminal's last holder, exits.
	io.Copy(&buf, f)
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("cq %s on a pty: did not end within 30s; output so far:\n%s", strings.Join(args, " "), buf.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n"), code
}
