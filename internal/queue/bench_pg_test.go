package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// The PostgreSQL benchmarks measure what bench/river measures of River
// on the same server in the same run (make bench): batch enqueue, and
// claim+complete of a backlog by workers cycling as cq worker does. They
// skip, saying why, when no server answers (storetest.Postgres).

func pgBenchStore(b *testing.B) *queue.Store {
	b.Helper()
	pg := storetest.Postgres()
	return queue.New(pg.Open(b, pg.New(b)))
}

// BenchmarkPGEnqueueBatch stores 1000 tasks per transaction on
// PostgreSQL: ns/op is per batch, tasks/s per task.
func BenchmarkPGEnqueueBatch(b *testing.B) {
	st := pgBenchStore(b)
	batch := make([]queue.Spec, 1000)
	for i := range batch {
		batch[i] = spec(b, queue.Spec{})
	}
	ctx := context.Background()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Create(ctx, batch, queue.CreateOptions{Enqueue: true}); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkPGClaimComplete runs a backlog of b.N tasks on PostgreSQL with
// several workers at once, each with 64 slots, cycling as cq worker does
// when its tasks end at once (workerCycles): one op is one task from
// claim to finish, cycles/s tasks per second across the workers.
func BenchmarkPGClaimComplete(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			st := pgBenchStore(b)
			fill(b, st, b.N, queue.Spec{})
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := range workers {
				share := b.N / workers
				if w == 0 {
					share += b.N % workers
				}
				wg.Go(func() { errs[w] = cycleShare(st, fmt.Sprintf("bench-%d", w), share, batchSlots) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// cycleShare is workerCycles for one of several workers sharing a
// backlog: it runs until it has finished n tasks or finds none to claim.
func cycleShare(st *queue.Store, worker string, n, slots int) error {
	ctx := context.Background()
	p := queue.ClaimParams{Worker: worker, Lease: time.Minute}
	zero := 0
	inflight, err := st.ClaimN(ctx, p, min(slots, n))
	if err != nil {
		return err
	}
	for done := 0; done < n && len(inflight) > 0; {
		starts := make([]queue.Start, len(inflight))
		fs := make([]queue.Finish, len(inflight))
		for i, c := range inflight {
			starts[i] = queue.Start{RunID: c.RunID, Token: c.Token, Pid: 1, Pgid: 1}
			fs[i] = queue.Finish{RunID: c.RunID, Token: c.Token, Outcome: queue.Outcome{State: queue.RunSucceeded, ExitCode: &zero}}
		}
		done += len(fs)
		res, err := st.Cycle(ctx, starts, fs, &queue.ClaimN{Params: p, N: min(slots, max(n-done, 0))})
		if err != nil {
			return err
		}
		for _, e := range res.StartErrs {
			if e != nil {
				return fmt.Errorf("start: %w", e)
			}
		}
		for _, f := range res.Finished {
			if f.Err != nil || f.TaskState != queue.TaskDone {
				return fmt.Errorf("finish: %s, %w", f.TaskState, f.Err)
			}
		}
		inflight = res.Claimed
	}
	return nil
}
