package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/db"
	"github.com/cq-dev/cq/internal/queue"
)

func benchStore(b *testing.B) *queue.Store {
	b.Helper()
	d, err := db.Open(context.Background(), filepath.Join(b.TempDir(), "cq.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return queue.New(d)
}

func spec(b *testing.B, sp queue.Spec) queue.Spec {
	b.Helper()
	if sp.Cmd == nil {
		sp.Cmd = []string{"true"}
	}
	n, err := sp.Normalize()
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkEnqueueOne is one create-and-enqueue transaction per task.
func BenchmarkEnqueueOne(b *testing.B) {
	st := benchStore(b)
	sp := spec(b, queue.Spec{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Create(ctx, []queue.Spec{sp}, queue.CreateOptions{Enqueue: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueBatch stores 1000 tasks per transaction; ns/op is per task.
func BenchmarkEnqueueBatch(b *testing.B) {
	st := benchStore(b)
	batch := make([]queue.Spec, 1000)
	for i := range batch {
		batch[i] = spec(b, queue.Spec{})
	}
	ctx := context.Background()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		if _, err := st.Create(ctx, batch, queue.CreateOptions{Enqueue: true}); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
}

func fill(b *testing.B, st *queue.Store, n int, sp queue.Spec) {
	b.Helper()
	ctx := context.Background()
	batch := make([]queue.Spec, 0, 5000)
	for i := 0; i < n; i++ {
		batch = append(batch, spec(b, sp))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := st.Create(ctx, batch, queue.CreateOptions{Enqueue: true}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkClaimComplete is one claim, start and finish per op, beside a
// backlog of waiting tasks.
func BenchmarkClaimComplete(b *testing.B) {
	for _, backlog := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			st := benchStore(b)
			fill(b, st, backlog+b.N, queue.Spec{})
			claimCompleteLoop(b, st)
		})
	}
}

// BenchmarkClaimBesideBlockedLane claims unkeyed tasks while 100k tasks
// wait behind one busy key lane; the claim must not walk past them.
func BenchmarkClaimBesideBlockedLane(b *testing.B) {
	st := benchStore(b)
	ctx := context.Background()
	fill(b, st, 1, queue.Spec{Key: "busy", Priority: "P0"})
	if c, err := st.Claim(ctx, queue.ClaimParams{Worker: "hog", Lease: time.Hour}); err != nil || c == nil {
		b.Fatal("cannot occupy the lane", err)
	}
	fill(b, st, 100000, queue.Spec{Key: "busy", Priority: "P0"})
	fill(b, st, b.N, queue.Spec{})
	claimCompleteLoop(b, st)
}

func claimCompleteLoop(b *testing.B, st *queue.Store) {
	ctx := context.Background()
	zero := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := st.Claim(ctx, queue.ClaimParams{Worker: "bench", Lease: time.Minute})
		if err != nil || c == nil {
			b.Fatal("claim:", c, err)
		}
		if err := st.StartRun(ctx, c.RunID, c.Token, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := st.FinishRun(ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: &zero}); err != nil {
			b.Fatal(err)
		}
	}
}
