package worker

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/db"
	"github.com/cq-dev/cq/internal/queue"
)

// TestWorkerStartsDelayedWorkWhenDue: an idle worker starts a delayed
// task when it falls due, by a timer armed when the write that stored it
// woke the worker, not at its next poll (an hour here) or maintenance
// pass; and likewise a task stored delayed before the worker started.
func TestWorkerStartsDelayedWorkWhenDue(t *testing.T) {
	home := t.TempDir()
	d, err := db.Open(context.Background(), filepath.Join(home, "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	st := queue.New(d)
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
