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

// ptyTimeout bounds one command run on a pseudo-terminal.
const ptyTimeout = 60 * time.Second

// runPTY runs cq (this test binary, from $PATH) with env in dir, its
// stdin, stdout and stderr on one pseudo-terminal of cols×rows, reads
// everything it writes until it exits, and returns that output with
// "\r\n" turned into "\n", and the exit code.
func runPTY(t *testing.T, env []string, dir string, cols, rows int, args ...string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ptyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = env, dir
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	defer f.Close()
	var buf bytes.Buffer
	// The read ends with EIO once the process (and anything it left
	// holding the terminal) is gone.
	_, _ = io.Copy(&buf, f)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("cq %s on a pty: did not end within %v; output %q", strings.Join(args, " "), ptyTimeout, buf.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	return strings.ReplaceAll(buf.String(), "\r\n", "\n"), code
}
