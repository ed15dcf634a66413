package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// TestWorkerStartsDelayedWorkWhenDue: an idle worker starts a delayed
// task when it falls due, by a timer armed when the write that stored it
// woke the worker, not at its next poll (an hour here) or maintenance
// pass; and likewise a task stored delayed before the worker started.
func TestWorkerStartsDelayedWorkWhenDue(t *testing.T) {
	home, st := testStore(t)
	d := sqlite.DBOf(st.Backend())
	add := func(id, delay string) {
		t.Helper()
		sp, err := queue.Spec{ID: id, Cmd: []string{"true"}, Delay: delay}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(context.Background(), []queue.Spec{sp}, queue.CreateOptions{Enqueue: true}); err != nil {
			t.Fatal(err)
		}
	}
	add("before", "300ms")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := New(st, Options{Home: home, DBPath: d.Path, PollEvery: time.Hour, HeartbeatEvery: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	add("after", "300ms")
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range []string{"before", "after"} {
		for {
			task, err := st.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if task.State == queue.TaskDone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s is %s 30 s after it fell due; want done", id, task.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// testStore opens a new store in a new home.
func testStore(t *testing.T) (home string, st *queue.Store) {
	t.Helper()
	home = t.TempDir()
	return home, queue.New(storetest.OpenSQLite(t, home).Store())
}

// TestRefusedStartWritesTheSummary: a run cancelled while queued, after
// its worker spawned it but before the start was recorded, ends in the
// cancel's transaction, which has no folder to write; the worker whose
// start is refused writes its summary.json (it is written when the run
// ends, whoever ends it).
func TestRefusedStartWritesTheSummary(t *testing.T) {
	home, st := testStore(t)
	ctx := context.Background()
	sp, err := queue.Spec{ID: "x", Cmd: []string{"true"}}.Normalize()
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
	if _, _, err := st.Cancel(ctx, "x", ""); err != nil {
		t.Fatal(err)
	}
	startErr := st.StartRun(ctx, c.RunID, c.Token, 0, 0)
	if !queue.IsConflict(startErr) {
		t.Fatalf("start after the cancel: %v, want a conflict", startErr)
	}
	w := New(st, Options{Home: home, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.started([]*run{{c: c}}, []error{startErr})
	b, err := os.ReadFile(filepath.Join(home, "runs", c.RunID, "summary.json"))
	if err != nil {
		t.Fatalf("no summary after a refused start: %v", err)
	}
	var got struct{ State, Reason string }
	if err := json.Unmarshal(b, &got); err != nil || got.State != queue.RunCancelled || got.Reason != "cancelled by user" {
		t.Errorf("summary %s (%v); want state cancelled, reason cancelled by user", b, err)
	}
}
