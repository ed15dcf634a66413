package main

// The worker's own want of resources is not its tasks' failure: a spawn
// that fails for lack of open files or processes gives the run back and
// the worker claims less; a task that takes every process the user may
// have never takes its worker down. Limits are set with ulimit in a
// shell that then runs cq; the process limit is run as an unprivileged
// user, since root is not bound by it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// limitedEnv is a home and a copy of this binary, named cq, that a user
// without privileges can use, and the credentials to run as that user:
// nobody when the tests run as root, the current user otherwise (nil).
type limitedEnv struct {
	dir, home, bin string
	cred           *syscall.Credential
}

func newLimitedEnv(t *testing.T) *limitedEnv {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash for ulimit -u")
	}
	e := &limitedEnv{}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("runs as root and there is no user nobody to run the limited worker as: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		e.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are private to the test's user.
	dir, err := os.MkdirTemp("", "cq-limits-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	e.dir, e.home, e.bin = dir, filepath.Join(dir, "home"), filepath.Join(dir, "bin")
	for _, d := range []string{e.home, e.bin} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(exe, filepath.Join(e.bin, "cq"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, e.home, e.bin} {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

// environ is the environment of the env's processes.
func (e *limitedEnv) environ() []string {
	return []string{"PATH=" + e.bin + ":/usr/local/bin:/usr/bin:/bin", "CQ_HOME=" + e.home, "HOME=" + e.dir, "TZ=UTC", "GORACE=" + noExitSleep(os.Getenv("GORACE"))}
}

// bash runs script with bash as the env's user, in its home, with its cq
// first in PATH; it returns the output and the exit code.
func (e *limitedEnv) bash(t *testing.T, timeout time.Duration, script string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = e.home
	cmd.Env = e.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred, Setpgid: true}
	// A worker the deadline catches is killed with what it started.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("bash -c %q did not end within %v; stderr:\n%s", script, timeout, errb.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bash -c %q: %v", script, err)
	}
	return out.String(), errb.String(), code
}

// limitedProc is a background bash of a limitedEnv.
type limitedProc struct {
	cmd  *exec.Cmd
	errb *strings.Builder
	done chan error
}

// start runs script with bash in the background, as bash does.
func (e *limitedEnv) start(t *testing.T, script string) *limitedProc {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = e.home
	cmd.Env = e.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred, Setpgid: true}
	p := &limitedProc{cmd: cmd, errb: &strings.Builder{}, done: make(chan error, 1)}
	cmd.Stderr = p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-p.done
		p.done <- err
	})
	return p
}

// wait waits for the process to end (failing the test at timeout) and
// returns its exit code and stderr.
func (p *limitedProc) wait(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), p.errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, p.errb.String()
	case <-time.After(timeout):
		t.Fatalf("did not end within %v", timeout)
	}
	return -1, ""
}

// limitedTask is what the resource tests read of cq ls -o json.
type limitedTask struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (e *limitedEnv) states(t *testing.T) map[string]int {
	t.Helper()
	out, errs, code := e.bash(t, time.Minute, "cq ls --limit 0 -o json")
	if code != 0 {
		t.Fatalf("cq ls: exit %d: %s", code, errs)
	}
	var ts []limitedTask
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, x := range ts {
		n[x.State]++
	}
	return n
}

// userProcs counts the processes (threads included) of uid, as the
// kernel's process limit counts them.
func userProcs(uid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		st, err := os.Stat("/proc/" + ent.Name())
		if err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		tasks, _ := os.ReadDir("/proc/" + ent.Name() + "/task")
		n += len(tasks)
	}
	return n
}

// TestWorkerOpenFilesLimit: with fewer descriptors than its runs need, a
// worker gives back the runs it cannot start (no budget spent) and claims
// less, so every task ends done instead of failing for the worker's want.
func TestWorkerOpenFilesLimit(t *testing.T) {
	e := newCQEnv(t, 2*time.Minute, true)
	var batch strings.Builder
	for i := range 100 {
		fmt.Fprintf(&batch, `{"id":"t%03d","cmd":["sleep","0.2"]}`+"\n", i)
	}
	e.runIn(batch.String(), "enqueue", "--batch")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "ulimit -n 64 && exec cq worker --once --concurrency 32")
	cmd.Env, cmd.Dir = e.env, e.dir
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker: %v\n%s", err, errb.String())
	}
	if log := errb.String(); !strings.Contains(log, "too many open files") && !strings.Contains(log, "bad file descriptor") {
		t.Fatalf("the worker never ran out of descriptors, so this test proved nothing; its log:\n%s", errb.String())
	}
	out := e.ok("ls", "--limit", "0", "-o", "json")
	var ts []limitedTask
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatal(err)
	}
	var notDone []string
	for _, x := range ts {
		if x.State != "done" {
			notDone = append(notDone, x.ID+" "+x.State)
		}
	}
	if len(notDone) > 0 {
		t.Errorf("%d tasks not done (%s, ...): a spawn that failed for the worker's want of descriptors is not the task's failure", len(notDone), notDone[0])
	}
	if len(ts) != 100 {
		t.Errorf("%d tasks listed, want 100", len(ts))
	}
	// The given-back runs were released, never failed.
	for _, ev := range e.events() {
		if ev.Kind == "run.failed" {
			t.Errorf("a run failed: %s", ev)
		}
	}
}

// TestWorkerSurvivesForkBomb: a task that takes every process its user
// may have (ulimit -u) does not take its worker down, and the other tasks
// are not failed for it: their spawns are given back until it is gone.
func TestWorkerSurvivesForkBomb(t *testing.T) {
	e := newLimitedEnv(t)
	uid := os.Getuid()
	if e.cred != nil {
		uid = int(e.cred.Uid)
	}
	// Room for the worker and its supervisor; the bomb takes the rest.
	// Processes the user already has count against the limit too.
	limit := userProcs(uid) + 150
	if _, errs, code := e.bash(t, time.Minute, `cq enqueue --id bomb --timeout 8s -- bash -c 'while :; do sleep 100 & done 2>/dev/null'`); code != 0 {
		t.Fatalf("enqueue: %d %s", code, errs)
	}
	worker := e.start(t, fmt.Sprintf("ulimit -u %d && exec cq worker --once --concurrency 4 --grace 1s", limit))
	// Once the bomb holds every process it may, the others arrive, from
	// a shell without the limit.
	eventually(t, time.Minute, "the bomb reaches the process limit", func() (bool, string) {
		n := userProcs(uid)
		return n >= limit-2, fmt.Sprintf("%d processes of %d", n, limit)
	})
	var batch strings.Builder
	for i := range 20 {
		fmt.Fprintf(&batch, `{"id":"t%02d","cmd":["sleep","0.2"]}`+"\n", i)
	}
	if _, errs, code := e.bash(t, time.Minute, "cq enqueue --batch <<'EOF'\n"+batch.String()+"EOF"); code != 0 {
		t.Fatalf("enqueue: %d %s", code, errs)
	}
	code, errs := worker.wait(t, 3*time.Minute)
	if code != 0 || strings.Contains(errs, "pthread_create") || strings.Contains(errs, "fatal error") {
		t.Fatalf("worker exit %d; its log:\n%s", code, errs)
	}
	if !strings.Contains(errs, "resource temporarily unavailable") {
		t.Fatalf("no spawn was given back, so this test proved nothing; the worker's log:\n%s", errs)
	}
	n := e.states(t)
	// The bomb itself timed out (blocked for its timeout retry); every
	// other task ran and succeeded.
	if n["done"] != 20 || n["failed"] != 0 || n["blocked"] != 1 {
		t.Errorf("tasks by state %v, want 20 done and the bomb blocked for its retry", n)
	}
	out, errs2, code := e.bash(t, time.Minute, "cq show bomb -o json")
	if code != 0 {
		t.Fatalf("cq show bomb: %d %s", code, errs2)
	}
	var bomb struct {
		Runs []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &bomb); err != nil {
		t.Fatal(err)
	}
	if len(bomb.Runs) != 1 || bomb.Runs[0].State != "timeout" {
		t.Fatalf("bomb's runs %+v, want one that timed out", bomb.Runs)
	}
	if pids := wkRunProcs(bomb.Runs[0].ID); len(pids) > 0 {
		t.Errorf("processes of the bomb's run survive its worker: %v", pids)
	}
}
