package main

// cq logs --follow before the first run, --both, --tail.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// bgCQ is a cq process whose stdout the test reads while it runs.
type bgCQ struct {
	cmd         *exec.Cmd
	out, errout lockedBuffer
}

func startCQ(t *testing.T, e *cqEnv, args ...string) *bgCQ {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	p := &bgCQ{cmd: e.command(ctx, "", args...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errout
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = p.cmd.Wait()
	})
	return p
}

// wait returns the exit code once the process has ended.
func (p *bgCQ) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// waitOut waits until the process has printed exactly want.
func (p *bgCQ) waitOut(t *testing.T, want string) {
	t.Helper()
	eventually(t, 30*time.Second, "stdout "+want, func() (bool, string) {
		got := p.out.String()
		return got == want, got
	})
}

// opened reports whether the process has the file at path open.
func (p *bgCQ) opened(path string) bool {
	fds := filepath.Join("/proc", itoa(p.cmd.Process.Pid), "fd")
	ents, err := os.ReadDir(fds)
	if err != nil {
		return false
	}
	for _, ent := range ents {
		if l, err := os.Readlink(filepath.Join(fds, ent.Name())); err == nil && l == path {
			return true
		}
	}
	return false
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLogsFollowWaitsForRun: cq logs -f on a task with no run yet waits
// for its first run and prints it; on a task that ends without one it
// exits 4.
func TestLogsFollowWaitsForRun(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "t", "--hold", "--shell", "echo out1; echo out2")
	p := startCQ(t, e, "logs", "-f", "t")
	// Once it has the store open, it has looked (or is about to look) at
	// a task with no run; only then may the run begin.
	eventually(t, 30*time.Second, "cq logs -f has the store open", func() (bool, string) {
		return p.opened(filepath.Join(e.home, "cq.db")), "not open"
	})
	e.ok("release", "t")
	runOnce(t, e)
	if code := p.wait(t); code != 0 {
		t.Fatalf("cq logs -f: exit %d, stderr %q", code, p.errout.String())
	}
	if got := p.out.String(); got != "out1\nout2\n" {
		t.Errorf("cq logs -f printed %q, want the first run's output", got)
	}

	e.ok("enqueue", "--id", "never", "--hold", "--", "true")
	p = startCQ(t, e, "logs", "--follow", "never")
	e.ok("cancel", "never")
	if code := p.wait(t); code != 4 {
		t.Errorf("cq logs -f of a task cancelled before any run: exit %d, want 4", code)
	}
	if errs := p.errout.String(); !strings.Contains(errs, "task never ended cancelled with no run yet") {
		t.Errorf("stderr %q: want the task said ended without a run", errs)
	}
	// Without --follow, no run is not found at once, as before.
	if _, errs, code := e.run("logs", "never"); code != 4 || !strings.Contains(errs, "has no run yet") {
		t.Errorf("cq logs of a task with no run: exit %d, stderr %q; want 4, no run yet", code, errs)
	}
}

// TestLogsBoth: --both --follow prints stdout's and stderr's lines in the
// order they were written when they are written apart; without --follow,
// stdout's lines, then stderr's.
func TestLogsBoth(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	startBgWorker(t, e)
	e.ok("enqueue", "--id", "t", "--shell", `echo out1; while [ ! -e g1 ]; do sleep 0.02; done
echo err1 >&2; while [ ! -e g2 ]; do sleep 0.02; done
echo out2; printf 'err2' >&2`)
	p := startCQ(t, e, "logs", "-f", "--both", "t")
	p.waitOut(t, "out1\n")
	touch(t, e.path("g1"))
	p.waitOut(t, "out1\nerr1\n")
	touch(t, e.path("g2"))
	if code := p.wait(t); code != 0 {
		t.Fatalf("cq logs -f --both: exit %d, stderr %q", code, p.errout.String())
	}
	// A last line with no newline is printed once the run has ended,
	// with one.
	if got := p.out.String(); got != "out1\nerr1\nout2\nerr2\n" {
		t.Errorf("cq logs -f --both printed %q, want out1 err1 out2 err2, one a line", got)
	}
	if got := e.ok("logs", "--both", "t"); got != "out1\nout2\nerr1\nerr2\n" {
		t.Errorf("cq logs --both printed %q, want stdout's lines, then stderr's", got)
	}
	if _, errs, code := e.run("logs", "--both", "--stderr", "t"); code != 1 || !strings.Contains(errs, "not both") {
		t.Errorf("--both --stderr: exit %d, stderr %q; want 1", code, errs)
	}
}

// TestLogsTail: --tail N prints the last N lines, then follows with -f.
func TestLogsTail(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "five", "--shell", `printf 'l1\nl2\nl3\nl4\nl5\n'; printf 'e1\ne2\ne3' >&2`)
	runOnce(t, e)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tail", "2"}, "l4\nl5\n"},
		{[]string{"--tail", "0"}, ""},
		{[]string{"--tail", "5"}, "l1\nl2\nl3\nl4\nl5\n"},
		{[]string{"--tail", "9"}, "l1\nl2\nl3\nl4\nl5\n"},
		// A last line without its newline counts as a line.
		{[]string{"--tail", "2", "--stderr"}, "e2\ne3"},
		{[]string{"--tail", "1", "--both"}, "l5\ne3\n"},
	} {
		if got := e.ok(append([]string{"logs", "five"}, c.args...)...); got != c.want {
			t.Errorf("cq logs five %s printed %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	if _, errs, code := e.run("logs", "five", "--tail", "-1"); code != 1 || !strings.Contains(errs, "--tail") {
		t.Errorf("--tail -1: exit %d, stderr %q; want 1 naming --tail", code, errs)
	}

	startBgWorker(t, e)
	e.ok("enqueue", "--id", "slow", "--shell", `printf 'l1\nl2\nl3\n'; touch wrote; while [ ! -e go ]; do sleep 0.02; done; echo l4`)
	eventually(t, 30*time.Second, "slow wrote", func() (bool, string) {
		_, err := os.Stat(e.path("wrote"))
		return err == nil, "no file wrote"
	})
	p := startCQ(t, e, "logs", "-f", "--tail", "2", "slow")
	p.waitOut(t, "l2\nl3\n")
	touch(t, e.path("go"))
	if code := p.wait(t); code != 0 {
		t.Fatalf("cq logs -f --tail 2: exit %d, stderr %q", code, p.errout.String())
	}
	if got := p.out.String(); got != "l2\nl3\nl4\n" {
		t.Errorf("cq logs -f --tail 2 printed %q, want the last 2 lines, then what followed", got)
	}
}

// runOnce runs cq worker --once (its log goes to stderr) and requires exit 0.
func runOnce(t *testing.T, e *cqEnv) {
	t.Helper()
	if _, errs, code := e.run("worker", "--once"); code != 0 {
		t.Fatalf("cq worker --once: exit %d, stderr %q", code, errs)
	}
}
