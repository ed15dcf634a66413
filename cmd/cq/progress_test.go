package main

// Progress bars of cq enqueue --batch and cq cleanup: drawn on a terminal
// only.

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestBatchProgress(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	const n = 1500
	batch := strings.Repeat(`{"cmd":["true"]}`+"\n", n)
	if err := os.WriteFile(e.path("batch.jsonl"), []byte(batch), 0o600); err != nil {
		t.Fatal(err)
	}
	// On a pty stdout and stderr share the terminal: the ids and the bar.
	out, code := runPTY(t, e.env, e.dir, 100, 24, "enqueue", "--batch", "-f", "batch.jsonl")
	if code != 0 {
		t.Fatalf("exit %d; output %q", code, out)
	}
	if !strings.Contains(out, "storing 1500/1500") || !strings.Contains(out, "100 %") {
		t.Errorf("output %q: no finished bar storing 1500/1500", out)
	}
	// Piped: the ids alone, nothing on stderr.
	stdout, errs, code := e.runIn(batch, "enqueue", "--batch")
	if code != 0 || errs != "" || strings.Count(stdout, "\n") != n {
		t.Errorf("piped cq enqueue --batch: exit %d, stderr %q, %d lines; want 0, nothing, %d ids", code, errs, strings.Count(stdout, "\n"), n)
	}
	// A small batch is stored too fast for a bar.
	out, code = runPTY(t, e.env, e.dir, 100, 24, "enqueue", "--batch", "-f", "small.jsonl")
	if code != 1 || strings.Contains(out, "storing") {
		t.Errorf("a missing file: exit %d, output %q; want 1 and no bar", code, out)
	}
}

func TestCleanupProgress(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	for range 3 {
		e.ok("enqueue", "--", "true")
	}
	runOnce(t, e)
	// Nothing expired: no bar.
	out, code := runPTY(t, e.env, e.dir, 100, 24, "cleanup")
	if code != 0 || strings.Contains(out, "deleting") {
		t.Errorf("cleanup of nothing: exit %d, output %q; want 0 and no bar", code, out)
	}
	out, code = runPTY(t, e.env, e.dir, 100, 24, "cleanup", "--done", "0s")
	if code != 0 || !strings.Contains(out, "deleting 3/3") {
		t.Errorf("cleanup --done 0s: exit %d, output %q; want 0 and a bar at deleting 3/3", code, out)
	}
	for range 2 {
		e.ok("enqueue", "--", "true")
	}
	runOnce(t, e)
	if _, errs, code := e.run("cleanup", "--done", "0s"); code != 0 || errs != "" {
		t.Errorf("piped cleanup: exit %d, stderr %q; want 0 and nothing", code, errs)
	}
}
