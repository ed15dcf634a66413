package queue_test

// Benchmarks for make bench (bench/run.sh reads their names and units to
// check the goals in bench/README.md).
//
// The stores the claim benchmarks work on are built once per test binary
// (a million tasks take a while to enqueue) and kept open across -count
// runs and b.N rounds; TestMain removes their folder. Before each round
// the backlog is topped up, with the timer stopped, so that every timed
// cycle runs beside at least the stated backlog.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

func TestMain(m *testing.M) {
	// The allocator tuned as cq tunes it, so the figures are cq's.
	sqlite.KeepFreedHeap()
	code := m.Run()
	closeShared()
	os.Exit(code)
}

func benchStore(b *testing.B) *queue.Store {
	b.Helper()
	return queue.New(storetest.OpenSQLite(b, "").Store())
}

func spec(b testing.TB, sp queue.Spec) queue.Spec {
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
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkEnqueueBatch stores 1000 tasks per transaction: ns/op is per
// batch of 1000, tasks/s per task.
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

func fill(b testing.TB, st *queue.Store, n int, sp queue.Spec) {
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

// shared is a store kept open for the whole test binary.
type shared struct {
	once sync.Once
	st   *queue.Store
	d    *sqlite.DB
	err  error
	todo int // unkeyed tasks waiting in it
}

var (
	sharedDirOnce sync.Once
	sharedDir     string
	sharedDirErr  error
	sharedMu      sync.Mutex
	sharedAll     = map[string]*shared{}
)

// sharedStore returns the store called name, built by build on first use.
func sharedStore(b *testing.B, name string, build func(b *testing.B, s *shared)) *shared {
	b.Helper()
	sharedDirOnce.Do(func() { sharedDir, sharedDirErr = os.MkdirTemp("", "cq-queue-bench-") })
	if sharedDirErr != nil {
		b.Fatal(sharedDirErr)
	}
	sharedMu.Lock()
	s := sharedAll[name]
	if s == nil {
		s = &shared{}
		sharedAll[name] = s
	}
	sharedMu.Unlock()
	s.once.Do(func() {
		start := time.Now()
		s.d, s.err = sqlite.Open(context.Background(), filepath.Join(sharedDir, name+".db"))
		if s.err != nil {
			return
		}
		s.st = queue.New(s.d.Store())
		build(b, s)
		b.Logf("built the %s store in %v", name, time.Since(start).Round(time.Millisecond))
	})
	if s.err != nil || s.st == nil {
		b.Fatalf("the %s store could not be built: %v", name, s.err)
	}
	return s
}

func closeShared() {
	for _, s := range sharedAll {
		if s.d != nil {
			s.d.Close()
		}
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
}

// topUp enqueues unkeyed tasks until want of them wait.
func (s *shared) topUp(b *testing.B, want int) {
	b.Helper()
	if s.todo < want {
		fill(b, s.st, want-s.todo, queue.Spec{})
		s.todo = want
	}
}

// backlogs are the claim benchmarks' backlogs of waiting tasks.
var backlogs = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"1M", 1_000_000}}

// BenchmarkClaimComplete is one claim, start and finish per op (three
// transactions, as a worker does with one slot), beside a backlog of
// waiting tasks.
func BenchmarkClaimComplete(b *testing.B) {
	besideBacklogs(b, claimComplete)
}

// besideBacklogs runs tasks with run, b.N per round, beside each of the
// backlogs in its shared store, and reports cycles/s.
func besideBacklogs(b *testing.B, run func(b *testing.B, st *queue.Store, n int)) {
	for _, bl := range backlogs {
		b.Run("backlog="+bl.name, func(b *testing.B) {
			s := sharedStore(b, "backlog-"+bl.name, func(b *testing.B, s *shared) { s.topUp(b, bl.n) })
			s.topUp(b, bl.n+b.N)
			checkpointed(b, s.d.SQL)
			defer workerCheckpoints(b, s.d)()
			b.ResetTimer()
			run(b, s.st, b.N)
			s.todo -= b.N
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// batchSlots is the runs in flight of BenchmarkClaimCompleteBatched: a
// worker at --concurrency 64 whose tasks end at once.
const batchSlots = 64

// BenchmarkClaimCompleteBatched is claim, start and finish of one task
// per op as cq worker --concurrency 64 does them when its tasks end at
// once (BenchmarkWorkerCycle's pattern: one commit records the starts of
// the runs in flight, their ends, and claims as many), beside
// the same stores and backlogs as BenchmarkClaimComplete. cycles/s is
// the figure the claim+complete goal uses.
func BenchmarkClaimCompleteBatched(b *testing.B) {
	besideBacklogs(b, func(b *testing.B, st *queue.Store, n int) { workerCycles(b, st, n, batchSlots) })
}

// laneTasks is how many tasks wait behind the busy key lane.
const laneTasks = 100_000

// BenchmarkClaimBesideBlockedLane: one op claims, starts and finishes
// 500 unkeyed tasks (enqueued untimed) in each of two stores, one where
// laneTasks P0 tasks wait behind one running task of their key (beside)
// and one without them (alone), taking turns at going first. The claim
// must not walk past the blocked lane: the goal is beside within 1.25 ×
// alone. The two are measured in the same op, so the ratio holds however
// the machine's speed drifts during the run; ns/op is the time of both.
func BenchmarkClaimBesideBlockedLane(b *testing.B) {
	const per = 500
	alone := sharedStore(b, "lane-0", func(*testing.B, *shared) {})
	beside := sharedStore(b, "lane-100k", func(b *testing.B, s *shared) {
		ctx := context.Background()
		fill(b, s.st, 1, queue.Spec{Key: "busy", Priority: "P0"})
		if c, err := s.st.Claim(ctx, queue.ClaimParams{Worker: "hog", Lease: 24 * time.Hour}); err != nil || c == nil {
			b.Fatal("cannot occupy the lane", err)
		}
		fill(b, s.st, laneTasks, queue.Spec{Key: "busy", Priority: "P0"})
	})
	var took [2]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		alone.topUp(b, per)
		beside.topUp(b, per)
		b.StartTimer()
		for k := range 2 {
			j := (i + k) % 2
			s := []*shared{alone, beside}[j]
			start := time.Now()
			claimComplete(b, s.st, per)
			took[j] += time.Since(start)
			s.todo -= per
		}
	}
	b.StopTimer()
	b.ReportMetric(took[0].Seconds()*1000/float64(b.N), "alone-ms/op")
	b.ReportMetric(took[1].Seconds()*1000/float64(b.N), "beside-ms/op")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "beside/alone")
}

// claimComplete claims, starts and finishes n tasks, one at a time.
func claimComplete(b *testing.B, st *queue.Store, n int) {
	b.Helper()
	ctx := context.Background()
	zero := 0
	for i := 0; i < n; i++ {
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

// BenchmarkWorkerCycle runs tasks the way cq worker does, with slots runs
// in flight, in a new store holding only the tasks it runs: one
// transaction records the starts of the runs in flight (a short task
// ends before its start is recorded on its own, worker.startDelay),
// their ends, and claims as many new tasks. One op is one task run from
// claim to finish; cycles/s is tasks per second. It shows what batching
// buys over BenchmarkClaimComplete's three transactions per task.
func BenchmarkWorkerCycle(b *testing.B) {
	for _, slots := range []int{1, 4, batchSlots} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) {
			st := benchStore(b)
			fill(b, st, b.N, queue.Spec{})
			checkpointed(b, sqlite.DBOf(st.Backend()).SQL)
			defer workerCheckpoints(b, sqlite.DBOf(st.Backend()))()
			b.ResetTimer()
			workerCycles(b, st, b.N, slots)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// checkpointed checkpoints the whole WAL of d and empties it: what the
// untimed enqueues before a claim benchmark wrote is theirs to
// checkpoint, not the timed cycles'.
func checkpointed(b *testing.B, d interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}) {
	b.Helper()
	if _, err := d.ExecContext(context.Background(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
}

// workerCheckpoints checkpoints d in the background, as cq worker does
// (db.BackgroundCheckpoints), until the returned stop.
func workerCheckpoints(b *testing.B, d *sqlite.DB) (stop func()) {
	b.Helper()
	stop, err := d.BackgroundCheckpoints(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return stop
}

// workerCycles claims, starts and finishes n tasks of st with up to
// slots runs in flight, as cq worker's loop does when its tasks end
// before their starts are recorded on their own (worker.startDelay): one
// transaction per cycle (Store.Cycle) records the starts of the runs in
// flight, then their ends, then claims as many new tasks.
func workerCycles(b *testing.B, st *queue.Store, n, slots int) {
	b.Helper()
	ctx := context.Background()
	p := queue.ClaimParams{Worker: "bench", Lease: time.Minute}
	zero := 0
	inflight, err := st.ClaimN(ctx, p, min(slots, n))
	if err != nil {
		b.Fatal(err)
	}
	for done := 0; done < n; {
		if len(inflight) == 0 {
			b.Fatalf("%d of %d tasks run, and none claimed", done, n)
		}
		starts := make([]queue.Start, len(inflight))
		fs := make([]queue.Finish, len(inflight))
		for i, c := range inflight {
			starts[i] = queue.Start{RunID: c.RunID, Token: c.Token, Pid: 1, Pgid: 1}
			fs[i] = queue.Finish{RunID: c.RunID, Token: c.Token, Outcome: queue.Outcome{State: queue.RunSucceeded, ExitCode: &zero}}
		}
		done += len(fs)
		res, err := st.Cycle(ctx, starts, fs, &queue.ClaimN{Params: p, N: min(slots, max(n-done, 0))})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range res.StartErrs {
			if e != nil {
				b.Fatal("start:", e)
			}
		}
		for _, f := range res.Finished {
			if f.Err != nil || f.TaskState != queue.TaskDone {
				b.Fatal("finish:", f.TaskState, f.Err)
			}
		}
		inflight = res.Claimed
	}
}
