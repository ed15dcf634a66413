package maintenance_test

// Benchmarks for make bench-maint (not make bench: they are slow): cq
// health and cq cleanup over a million tasks.
//
// The stores are built straight in SQL, one INSERT … SELECT over a
// recursive CTE per table (a million tasks in seconds, not the minutes
// Create would take), once per test binary (sync.Once) in a temporary
// folder removed by TestMain: the setup does not depend on b.N and is
// not repeated by -count (set CQ_BENCH_DIR to keep them across runs).
// The cleanup benchmarks copy their template database before each
// operation, with the timer stopped.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// benchTasks is the size of the benchmark stores.
const benchTasks = 1_000_000

// benchNow is the clock of the benchmark stores.
var benchNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var (
	benchDirOnce sync.Once
	benchDir     string
	benchDirErr  error
)

// benchKeep is set when CQ_BENCH_DIR names a folder to keep the built
// stores in across runs (they are then built only if missing).
var benchKeep bool

func TestMain(m *testing.M) {
	// The allocator tuned as cq tunes it, so the figures are cq's.
	sqlite.KeepFreedHeap()
	code := m.Run()
	if benchDir != "" && !benchKeep {
		_ = os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func benchFolder(b *testing.B) string {
	b.Helper()
	benchDirOnce.Do(func() {
		if dir := os.Getenv("CQ_BENCH_DIR"); dir != "" {
			benchDir, benchKeep, benchDirErr = dir, true, os.MkdirAll(dir, 0o700)
			return
		}
		benchDir, benchDirErr = os.MkdirTemp("", "cq-bench-")
	})
	if benchDirErr != nil {
		b.Fatal(benchDirErr)
	}
	return benchDir
}

// benchTime is SQL for benchNow moved by the SQL expression secs
// (seconds), in cq's stored time format.
func benchTime(secs string) string {
	return fmt.Sprintf(`strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', '%s', (%s) || ' seconds')`, benchNow.Format("2006-01-02 15:04:05"), secs)
}

// benchBuild creates the store at path with n tasks. mix "live" is a
// working system: per 100 tasks 70 done, 5 failed, 5 cancelled, 10 todo
// over 10 queues, 5 blocked (retry, hold, scheduled), 1 doing, 4 inbox,
// created one a second up to now, one run each (a run for every task
// that got one), three events each. mix "expired" is a million tasks past
// retention: 80 % done, 10 % cancelled, 10 % failed, finished 60 days and
// more ago, with a run and three events each.
func benchBuild(b testing.TB, path string, n int, mix string) {
	b.Helper()
	start := time.Now()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var state string
	var created string
	switch mix {
	case "live":
		state = `CASE WHEN i % 100 < 70 THEN 'done' WHEN i % 100 < 75 THEN 'failed' WHEN i % 100 < 80 THEN 'cancelled'
			WHEN i % 100 < 90 THEN 'todo' WHEN i % 100 < 95 THEN 'blocked' WHEN i % 100 < 96 THEN 'doing' ELSE 'inbox' END`
		created = fmt.Sprintf("-(%d - i)", n)
	case "expired":
		state = `CASE WHEN i % 10 < 8 THEN 'done' WHEN i % 10 < 9 THEN 'cancelled' ELSE 'failed' END`
		created = fmt.Sprintf("-(%d - i) - 60 * 86400", n)
	default:
		b.Fatalf("unknown mix %q", mix)
	}
	stmts := []string{
		`CREATE TEMP TABLE gen AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ` + fmt.Sprint(n) + `)
			SELECT i, ` + state + ` AS state, ` + benchTime(created) + ` AS created FROM n`,
		`INSERT INTO queues (name, created_at, updated_at)
			WITH RECURSIVE q(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM q WHERE i < 9)
			SELECT 'q' || i, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z' FROM q`,
		`INSERT INTO tasks (id, state, queue, priority, seq, lane_head, spec, hold, not_before, not_before_why, blocked_reason,
			reason, attempts, todo_at, created_at, updated_at, finished_at)
			SELECT printf('t%07d', i), state, 'q' || (i % 10), i % 4,
				CASE WHEN state = 'inbox' THEN NULL ELSE i END,
				CASE WHEN state IN ('todo','blocked','doing') THEN 1 ELSE 0 END,
				'{"cmd":["true"],"queue":"q' || (i % 10) || '"}',
				CASE WHEN state = 'blocked' AND i % 3 = 1 THEN 1 ELSE 0 END,
				CASE WHEN state = 'blocked' AND i % 3 != 1 THEN ` + benchTime("3600") + ` END,
				CASE WHEN state = 'blocked' AND i % 3 = 0 THEN 'retry' WHEN state = 'blocked' AND i % 3 = 2 THEN 'scheduled' END,
				CASE WHEN state = 'blocked' THEN CASE i % 3 WHEN 0 THEN 'retry' WHEN 1 THEN 'hold' ELSE 'scheduled' END END,
				CASE WHEN state IN ('failed','cancelled') THEN 'fixture' END,
				CASE WHEN state IN ('inbox','todo') THEN 0 ELSE 1 END,
				CASE WHEN state = 'todo' THEN created END,
				created, created,
				CASE WHEN state IN ('done','failed','cancelled') THEN strftime('%Y-%m-%dT%H:%M:%fZ', created, '+' || (i % 300 + 1) || ' seconds') END
			FROM gen`,
		`INSERT INTO runs (id, task_id, attempt, state, queue, worker, created_at, started_at, ended_at, exit_code, lease_token, lease_expires_at)
			SELECT printf('r%07d', i), printf('t%07d', i), 1,
				CASE state WHEN 'done' THEN 'succeeded' WHEN 'failed' THEN CASE WHEN i % 7 = 0 THEN 'timeout' ELSE 'failed' END
					WHEN 'cancelled' THEN 'cancelled' WHEN 'doing' THEN 'running' ELSE 'failed' END,
				'q' || (i % 10), 'bench:1', created, created,
				CASE WHEN state = 'doing' THEN NULL ELSE strftime('%Y-%m-%dT%H:%M:%fZ', created, '+' || (i % 300 + 1) || ' seconds') END,
				CASE state WHEN 'done' THEN 0 WHEN 'doing' THEN NULL ELSE 1 END,
				CASE WHEN state = 'doing' THEN 'tok' END,
				CASE WHEN state = 'doing' THEN ` + benchTime("3600") + ` END
			FROM gen WHERE state NOT IN ('inbox','todo') AND NOT (state = 'blocked' AND i % 3 != 0)`,
		`INSERT INTO events (at, kind, task_id, from_state, to_state)
			SELECT created, 'task.created', printf('t%07d', i), NULL, 'inbox' FROM gen
			UNION ALL SELECT created, 'task.todo', printf('t%07d', i), 'inbox', 'todo' FROM gen WHERE state != 'inbox'
			UNION ALL SELECT created, 'task.' || state, printf('t%07d', i), 'doing', state FROM gen WHERE state IN ('done','failed','cancelled')`,
		`DROP TABLE gen`,
	}
	err = d.Write(ctx, func(tx *sqlite.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("%.60s…: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.SQL.ExecContext(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	if _, err := d.SQL.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	var tasks int
	if err := d.SQL.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&tasks); err != nil || tasks != n {
		b.Fatalf("built %d tasks (%v), want %d", tasks, err, n)
	}
	b.Logf("built a %s store of %d tasks in %v", mix, n, time.Since(start).Round(time.Millisecond))
}

var (
	benchLiveOnce, benchExpiredOnce sync.Once
	benchLivePath, benchExpiredPath string
)

// benchStore returns the path of the shared store of that mix, built on
// first use.
func benchStore(b *testing.B, mix string) string {
	b.Helper()
	dir := benchFolder(b)
	once, path := &benchLiveOnce, &benchLivePath
	if mix == "expired" {
		once, path = &benchExpiredOnce, &benchExpiredPath
	}
	once.Do(func() {
		p := filepath.Join(dir, fmt.Sprintf("%s-%d.db", mix, benchTasks))
		if _, err := os.Stat(p); err == nil && benchKeep {
			*path = p
			return
		}
		benchBuild(b, p, benchTasks, mix)
		*path = p
	})
	if *path == "" {
		b.Fatalf("the %s store could not be built", mix)
	}
	return *path
}

// BenchmarkHealth is one Health call (cq health's queries) over a million
// tasks and their runs; the goal is under 500 ms.
func BenchmarkHealth(b *testing.B) {
	path := benchStore(b, "live")
	ctx := context.Background()
	d, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	st := queue.New(d.Store())
	st.Now = func() time.Time { return benchNow }
	th := queue.DefaultThresholds()
	h, err := st.Health(ctx, th) // warm the page cache
	if err != nil {
		b.Fatal(err)
	}
	if h.States[queue.TaskDone] != benchTasks*70/100 || h.Backlog != benchTasks/10 {
		b.Fatalf("unexpected store: states %v, backlog %d", h.States, h.Backlog)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Health(ctx, th); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/health")
}

// benchCopy copies the file src to dst.
func benchCopy(b *testing.B, src, dst string) {
	b.Helper()
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

// benchOpen copies the template store to a new folder and opens it twice:
// the store cleanup uses, and another pool (as another process would
// have) for a concurrent writer. Both are closed when the benchmark ends.
func benchOpen(b *testing.B, template string) (dir string, st, other *queue.Store) {
	b.Helper()
	ctx := context.Background()
	dir = b.TempDir()
	path := filepath.Join(dir, "cq.db")
	benchCopy(b, template, path)
	d, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	d2, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d2.Close() })
	st = queue.New(d.Store())
	st.Now = func() time.Time { return benchNow }
	return dir, st, queue.New(d2.Store())
}

// benchCleanupBatch is the batch size the benchmarks use: maintenance.Cleanup's
// default.
const benchCleanupBatch = maintenance.CleanupBatch

func benchMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkCleanup deletes a million expired tasks with their runs
// through Store.DeleteExpired, batch after batch, their events through
// Store.SweepEvents, slice after slice, then gives the
// pages back with Store.IncrementalVacuum, as maintenance.Cleanup does but
// without its pauses between batches, timing every call: each is one
// write transaction, so its time is the write lock's hold (with the
// commit's WAL auto-checkpoint, which does not hold the lock). It reports
// max-batch-ms (goal under 100 ms) and p99-batch-ms, max-sweep-step-ms
// for the events, and max-vacuum-step-ms and vacuum-ms for the vacuum.
func BenchmarkCleanup(b *testing.B) {
	template := benchStore(b, "expired")
	ctx := context.Background()
	var all []time.Duration
	var maxStep, maxSweep, vacuum time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_, st, _ := benchOpen(b, template)
		b.StartTimer()
		deleted := 0
		for _, state := range queue.CleanupStates {
			for {
				t0 := time.Now()
				n, _, err := st.DeleteExpired(ctx, state, queue.DefaultRetention(), benchCleanupBatch)
				all = append(all, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				deleted += n
				if n == 0 {
					break
				}
			}
		}
		for more := true; more; {
			t0 := time.Now()
			var err error
			if _, more, err = st.SweepEvents(ctx); err != nil {
				b.Fatal(err)
			}
			maxSweep = max(maxSweep, time.Since(t0))
		}
		v0 := time.Now()
		for {
			t0 := time.Now()
			freed, err := st.IncrementalVacuum(ctx, maintenance.VacuumStep)
			if err != nil {
				b.Fatal(err)
			}
			maxStep = max(maxStep, time.Since(t0))
			if freed == 0 {
				break
			}
		}
		vacuum += time.Since(v0)
		b.StopTimer()
		if deleted != benchTasks {
			b.Fatalf("deleted %d tasks, want %d", deleted, benchTasks)
		}
		b.StartTimer()
	}
	slices.Sort(all)
	b.ReportMetric(benchMS(all[len(all)-1]), "max-batch-ms")
	b.ReportMetric(benchMS(all[len(all)*99/100]), "p99-batch-ms")
	b.ReportMetric(benchMS(all[len(all)/2]), "p50-batch-ms")
	b.ReportMetric(benchMS(maxSweep), "max-sweep-step-ms")
	b.ReportMetric(benchMS(maxStep), "max-vacuum-step-ms")
	b.ReportMetric(benchMS(vacuum)/float64(b.N), "vacuum-ms")
}

// BenchmarkCleanupBesideWriter is one maintenance.Cleanup (cq cleanup) of
// 100k expired tasks while another connection (a worker renewing its
// lease, a producer) writes a small row every 5 ms. It reports
// max-writer-wait-ms, the longest that writer waited while tasks were
// being deleted, and max-writer-wait-vacuum-ms, while pages were being
// given back.
func BenchmarkCleanupBesideWriter(b *testing.B) {
	const n = benchTasks / 10
	benchSmallOnce.Do(func() {
		p := filepath.Join(benchFolder(b), fmt.Sprintf("expired-%d.db", n))
		if _, err := os.Stat(p); err != nil || !benchKeep {
			benchBuild(b, p, n, "expired")
		}
		benchSmallPath = p
	})
	if benchSmallPath == "" {
		b.Fatal("the store could not be built")
	}
	ctx := context.Background()
	var deleteWait, vacuumWait time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir, st, other := benchOpen(b, benchSmallPath)
		type sample struct {
			at   time.Time
			wait time.Duration
		}
		stop := make(chan struct{})
		samples := make(chan []sample, 1)
		go func() {
			var all []sample
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					samples <- all
					return
				case <-tick.C:
				}
				t0 := time.Now()
				if err := other.SetSystemState(ctx, map[string]string{"bench_probe": t0.String()}); err != nil {
					b.Error(err)
				}
				all = append(all, sample{t0, time.Since(t0)})
			}
		}()
		b.StartTimer()
		var lastBatch time.Time
		counts, err := maintenance.Cleanup(ctx, st, maintenance.CleanupOptions{
			Retention: queue.DefaultRetention(), Home: dir, Batch: benchCleanupBatch,
			Progress: func(map[string]int) { lastBatch = time.Now() },
		})
		b.StopTimer()
		close(stop)
		for _, s := range <-samples {
			if s.at.Before(lastBatch) {
				deleteWait = max(deleteWait, s.wait)
			} else {
				vacuumWait = max(vacuumWait, s.wait)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		if got := counts[queue.TaskDone] + counts[queue.TaskCancelled] + counts[queue.TaskFailed]; got != n {
			b.Fatalf("cleanup deleted %d tasks (%v), want %d", got, counts, n)
		}
		b.StartTimer()
	}
	b.ReportMetric(benchMS(deleteWait), "max-writer-wait-ms")
	b.ReportMetric(benchMS(vacuumWait), "max-writer-wait-vacuum-ms")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tasks/s")
}

var (
	benchSmallOnce sync.Once
	benchSmallPath string
)
