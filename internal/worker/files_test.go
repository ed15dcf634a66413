package worker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// TestSpawnNeverWritesThroughALink: a link at a run's stdout.log or a
// FIFO at its stderr.log (run ids are made at the claim, so these are
// put there between the claim and the spawn) is not opened: the run goes
// on with its output lost and says why, and the link's target keeps its
// content and mode. An intent whose payload.json is a link fails
// instead, for its handler needs the payload.
func TestSpawnNeverWritesThroughALink(t *testing.T) {
	home, st := testStore(t)
	ctx := context.Background()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o644); err != nil {
		t.Fatal(err)
	}
	unchanged := func() {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
			t.Errorf("the link's target holds %q (%v), want it as it was", b, err)
		}
		if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("the link's target's mode changed: %v (%v)", fi.Mode(), err)
		}
	}
	handlers := t.TempDir()
	if err := os.WriteFile(filepath.Join(handlers, "h"), []byte("#!/bin/sh\ncat >/dev/null\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	w := New(st, Options{Home: home, Handlers: handlers, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	claim := func(sp queue.Spec) *queue.Claimed {
		t.Helper()
		sp, err := sp.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, []queue.Spec{sp}, queue.CreateOptions{Enqueue: true}); err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(ctx, queue.ClaimParams{Worker: "w", Lease: time.Minute})
		if err != nil || c == nil {
			t.Fatalf("claim: %v %v", c, err)
		}
		if err := os.MkdirAll(filepath.Join(home, "runs", c.RunID), 0o700); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := claim(queue.Spec{ID: "cmd", Shell: "echo out; echo err >&2"})
	dir := filepath.Join(home, "runs", c.RunID)
	if err := os.Symlink(victim, filepath.Join(dir, "stdout.log")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "stderr.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var r *run
	var out *queue.Outcome
	go func() { defer close(done); r, out = w.spawn(c) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("spawn still blocked after 10 s")
	}
	if out != nil {
		t.Fatalf("spawn failed: %+v; want the run started with its output lost", out)
	}
	_ = r.cmd.Wait()
	r.stdout.Close()
	r.stderr.Close()
	if want := "output lost: stdout.log: refusing to use " + filepath.Join(dir, "stdout.log") + ": it is a symbolic link"; !strings.Contains(r.outputLost, want) {
		t.Errorf("outputLost %q, want it to say %q", r.outputLost, want)
	}
	unchanged()

	c = claim(queue.Spec{ID: "intent", Intent: "h", Payload: []byte(`{"a":1}`)})
	if err := os.Symlink(victim, filepath.Join(home, "runs", c.RunID, "payload.json")); err != nil {
		t.Fatal(err)
	}
	r, out = w.spawn(c)
	if out == nil {
		_ = r.cmd.Wait()
		t.Fatal("an intent whose payload.json is a link was started")
	}
	if !strings.Contains(out.Error, "payload: refusing to use") {
		t.Errorf("outcome error %q, want the payload's refusal", out.Error)
	}
	unchanged()
}
