package main

// cq wait --active on a worker's real runs: it waits for the runs live
// when it starts and for no run that starts later, neither a new task's
// nor a retry of a task it waits for.

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWaitActive(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	fileThere := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := os.Stat(e.path(name))
			return err == nil, "no file " + name
		}
	}
	// first fails its first run once released and is retried (100ms
	// later); its retry, other and later run until the test ends.
	e.ok("queue", "set", "a", "--backoff", "100ms")
	e.ok("enqueue", "--id", "first", "--queue", "a", "--retries", "1", "--shell",
		`if [ "$CQ_ATTEMPT" = 1 ]; then touch first-started; while [ ! -e release-first ]; do sleep 0.05; done; exit 1; fi
		touch retry-started; while [ ! -e stop ]; do sleep 0.05; done`)
	e.ok("enqueue", "--id", "other", "--queue", "b", "--shell", "touch other-started; while [ ! -e stop ]; do sleep 0.05; done")

	// No worker yet: todo tasks are not active, so nothing is waited for.
	if out := e.ok("wait", "--active", "--timeout", "30s"); out != "" {
		t.Fatalf("cq wait --active printed %q", out)
	}

	startBgWorker(t, e, "--concurrency", "4", "--grace", "1s")
	t.Cleanup(func() { _ = os.WriteFile(e.path("stop"), nil, 0o600) }) // before the worker's stop
	eventually(t, 30*time.Second, "first started", fileThere("first-started"))
	eventually(t, 30*time.Second, "other started", fileThere("other-started"))

	// The live line says the set is taken: first's run, not other's (queue b).
	p := startPTY(t, e.env, e.dir, 100, 24, "wait", "--active", "--queue", "a", "--timeout", "30s")
	eventually(t, 30*time.Second, "the live line", func() (bool, string) {
		out := p.output()
		return strings.Contains(out, "0/1 ended · 1 active · 0:0"), out
	})
	// A task of queue a that starts now is not waited for.
	e.ok("enqueue", "--id", "later", "--queue", "a", "--shell", "touch later-started; while [ ! -e stop ]; do sleep 0.05; done")
	eventually(t, 30*time.Second, "later started", fileThere("later-started"))
	// Nor is first's retry: cq wait is stopped until the retry runs, so
	// that its next look finds first doing again, in a run of its own.
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("release-first"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "first's retry started", fileThere("retry-started"))
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	out, code := p.wait(t)
	if code != 0 {
		t.Fatalf("cq wait --active --queue a: exit %d, want 0 (first's run ended); output %q", code, out)
	}
	fs := frames(out)
	if len(fs) == 0 || !regexp.MustCompile(`^1/1 ended · 0 active · 0:\d\d\n$`).MatchString(fs[len(fs)-1]) {
		t.Errorf("output %q: want the line ended on 1/1 ended · 0 active", out)
	}
	for _, id := range []string{"first", "later", "other"} {
		if st := taskState(t, e, id); st != "doing" {
			t.Errorf("task %s is %s, want doing", id, st)
		}
	}

	// At the deadline: 124, each task whose run is live named with it.
	runOf := func(id string) string {
		out := e.ok("show", id, "-o", "json")
		m := regexp.MustCompile(`"id": "([0-9a-z]+)",\s+"task_id": "` + id + `",\s+"attempt": (\d+),\s+"state": "running"`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("task %s has no running run:\n%s", id, out)
		}
		return m[1]
	}
	_, errs, code := e.run("wait", "--active", "--timeout", "1s")
	if code != 124 {
		t.Fatalf("cq wait --active --timeout 1s: exit %d, want 124; stderr %q", code, errs)
	}
	for _, id := range []string{"first", "later", "other"} {
		want := fmt.Sprintf("cq: timed out; task %s is still active (run %s running)\n", id, runOf(id))
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
	if n := strings.Count(errs, "\n"); n != 3 {
		t.Errorf("stderr has %d lines, want 3: %q", n, errs)
	}
	_, errs, code = e.run("wait", "--active", "--queue", "b", "--timeout", "1s")
	if code != 124 || errs != fmt.Sprintf("cq: timed out; task other is still active (run %s running)\n", runOf("other")) {
		t.Errorf("cq wait --active --queue b --timeout 1s: exit %d, stderr %q; want 124 and other named alone", code, errs)
	}

	// Cancelled runs end through cancelling: the drain waits for that
	// (exit 0: it ended, whatever the end), silently when piped.
	e.ok("cancel", "first", "later", "other")
	e.ok("wait", "--active", "--timeout", "30s")
	for _, id := range []string{"first", "later", "other"} {
		if st := taskState(t, e, id); st != "cancelled" {
			t.Errorf("task %s is %s after the drain, want cancelled", id, st)
		}
	}
	e.ok("wait", "--active")
}

// taskState is a task's state as cq show -o json prints it.
func taskState(t *testing.T, e *cqEnv, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  "state": "([a-z]+)"`).FindStringSubmatch(e.ok("show", id, "-o", "json"))
	if m == nil {
		t.Fatalf("cq show %s: no state", id)
	}
	return m[1]
}
