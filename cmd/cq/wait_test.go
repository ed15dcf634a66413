package main

// cq wait on a terminal: one live line on stderr, rewritten in place, and
// nothing of it when stderr is not a terminal.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
)

// ptyProc is a cq process on a pseudo-terminal whose output the test reads
// while it runs (runPTY reads it only once the process has ended).
type ptyProc struct {
	cmd    *exec.Cmd
	f      *os.File
	cancel context.CancelFunc
	read   chan struct{} // closed once the output is read to its end
	mu     sync.Mutex
	buf    bytes.Buffer
}

func startPTY(t *testing.T, env []string, dir string, cols, rows int, args ...string) *ptyProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ptyTimeout)
	p := &ptyProc{cmd: exec.CommandContext(ctx, "cq", args...), cancel: cancel, read: make(chan struct{})}
	p.cmd.Env, p.cmd.Dir = env, dir
	f, err := pty.StartWithSize(p.cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		cancel()
		t.Fatalf("cq %s on a pty: %v", strings.Join(args, " "), err)
	}
	p.f = f
	go func() {
		defer close(p.read)
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-p.read
		f.Close()
	})
	return p
}

// output is what the process wrote so far, "\r\n" turned into "\n".
func (p *ptyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.ReplaceAll(p.buf.String(), "\r\n", "\n")
}

// wait waits for the process's end and returns its output and exit code.
func (p *ptyProc) wait(t *testing.T) (string, int) {
	t.Helper()
	<-p.read
	err := p.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return p.output(), ee.ExitCode()
	case err != nil:
		t.Fatalf("cq on a pty: %v", err)
	}
	return p.output(), 0
}

// frames splits a live line's output into the texts drawn, each without
// its erase-to-end-of-line.
func frames(out string) []string {
	var fs []string
	for _, f := range strings.Split(out, "\r")[1:] {
		fs = append(fs, strings.ReplaceAll(f, "\x1b[K", ""))
	}
	return fs
}

// startBgWorker runs cq worker on e until the test ends.
func startBgWorker(t *testing.T, e *cqEnv, args ...string) {
	t.Helper()
	w := e.command(context.Background(), "", append([]string{"worker"}, args...)...)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.Process.Signal(syscall.SIGINT)
		_ = w.Wait()
	})
}

func TestWaitTerminalLine(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "fail", "--", "false")
	e.ok("enqueue", "--id", "slow", "--shell", "touch started; while [ ! -e go ]; do sleep 0.05; done")
	e.ok("enqueue", "--id", "last", "--", "true")
	e.ok("enqueue", "--id", "held", "--hold", "--", "true")
	startBgWorker(t, e)
	eventually(t, 30*time.Second, "slow started", func() (bool, string) {
		_, err := os.Stat(e.path("started"))
		return err == nil, "no file started"
	})

	// The line shows how the tasks stand, then follows them as they end.
	p := startPTY(t, e.env, e.dir, 100, 24, "wait", "fail", "slow", "last")
	eventually(t, 30*time.Second, "the live line", func() (bool, string) {
		out := p.output()
		return strings.Contains(out, "0/3 done · 1 failed · 1 running · 1 waiting · 0:0"), out
	})
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := p.wait(t)
	if code != 1 {
		t.Fatalf("exit %d, want 1; output %q", code, out)
	}
	fs := frames(out)
	last := fs[len(fs)-1]
	if !regexp.MustCompile(`^2/3 done · 1 failed · 0 running · 0 waiting · 0:\d\d\ncq: task fail ended failed.*\n$`).MatchString(last) {
		t.Errorf("last frame %q: want the final counts, a newline, then the failed task named", last)
	}
	for _, f := range fs[:len(fs)-1] {
		if strings.Contains(f, "\n") {
			t.Errorf("frame %q before the last one holds a newline: the line is not rewritten in place", f)
		}
	}

	// At the deadline: the last counts end the line, then the tasks not
	// ended are named. The elapsed time is redrawn as it passes.
	out, code = runPTY(t, e.env, e.dir, 100, 24, "wait", "--timeout", "2s", "slow", "held")
	if code != 124 {
		t.Fatalf("exit %d, want 124; output %q", code, out)
	}
	if !strings.Contains(out, "\r1/2 done · 0 failed · 0 running · 1 waiting · 0:01\x1b[K") {
		t.Errorf("output %q: no frame drawn at 0:01", out)
	}
	if !regexp.MustCompile(`waiting · 0:0\d\x1b\[K\ncq: timed out; task held is still blocked\n$`).MatchString(out) {
		t.Errorf("output %q: want the line ended, then the held task named", out)
	}

	// A narrow terminal gets a line cut to fit: a wrapped line could not
	// be rewritten in place.
	out, code = runPTY(t, e.env, e.dir, 30, 24, "wait", "slow", "last")
	if code != 0 {
		t.Fatalf("exit %d, want 0; output %q", code, out)
	}
	fs = frames(out)
	if len(fs) == 0 || fs[len(fs)-1] != "2/2 done · 0 failed · 0 runn…\n" {
		t.Errorf("output %q: want one frame cut to 29 columns with …, ending the line", out)
	}
	for _, f := range fs {
		if n := utf8.RuneCountInString(strings.TrimSuffix(f, "\n")); n > 29 {
			t.Errorf("frame %q is %d columns wide on a terminal of 30", f, n)
		}
	}

	// Not a terminal: nothing on stderr.
	if _, errs, code := e.run("wait", "slow", "last"); code != 0 || errs != "" {
		t.Errorf("piped cq wait: exit %d, stderr %q; want 0 and nothing", code, errs)
	}
}

// TestWaitQueueLive: cq wait --queue follows the tasks of the queue that
// were not ended when it started, and exits 1 when one of them fails.
func TestWaitQueueLive(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "gate", "--queue", "q", "--shell", "while [ ! -e go ]; do sleep 0.05; done")
	e.ok("enqueue", "--id", "bad", "--queue", "q", "--after", "gate", "--", "false")
	e.ok("enqueue", "--id", "other", "--queue", "r", "--hold", "--", "true")
	p := startPTY(t, e.env, e.dir, 100, 24, "wait", "--queue", "q")
	eventually(t, 30*time.Second, "the live line", func() (bool, string) {
		out := p.output()
		return strings.Contains(out, "0/2 done · 0 failed · 0 running · 2 waiting"), out
	})
	startBgWorker(t, e, "--queue", "q")
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := p.wait(t)
	if code != 1 {
		t.Fatalf("exit %d, want 1; output %q", code, out)
	}
	if !regexp.MustCompile(`\r1/2 done · 1 failed · 0 running · 0 waiting · 0:\d\d\x1b\[K\ncq: task bad ended failed.*\n$`).MatchString(out) {
		t.Errorf("output %q: want the final counts of queue q, then bad named", out)
	}
}

// TestWaitTerminalLineProgress: the live line shows what the running
// task reported with cq progress, and follows its reports.
func TestWaitTerminalLineProgress(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "job", "--shell",
		"cq progress --done 3 --total 10 copying; touch reported; while [ ! -e go ]; do sleep 0.05; done; cq progress --done 10 --total 10 copied; touch again; while [ ! -e end ]; do sleep 0.05; done")
	startBgWorker(t, e)
	eventually(t, 30*time.Second, "the first report", func() (bool, string) {
		_, err := os.Stat(e.path("reported"))
		return err == nil, "no file reported"
	})
	p := startPTY(t, e.env, e.dir, 120, 24, "wait", "job")
	eventually(t, 30*time.Second, "the live line with the progress", func() (bool, string) {
		out := p.output()
		return strings.Contains(out, "0/1 done · 0 failed · 1 running · 0 waiting · 0:0") && strings.Contains(out, " · 3/10 (30%) copying"), out
	})
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the live line with the next report", func() (bool, string) {
		out := p.output()
		return strings.Contains(out, " · 10/10 (100%) copied"), out
	})
	if err := os.WriteFile(e.path("end"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := p.wait(t); code != 0 {
		t.Fatalf("exit %d, want 0; output %q", code, out)
	}
}
