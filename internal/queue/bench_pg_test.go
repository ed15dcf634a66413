package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/postgres"
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
			shares(b, workers, func(w, share int) error {
				return cycleShare(st, fmt.Sprintf("bench-%d", w), share, batchSlots)
			})
		})
	}
}

// shares times b.N tasks run by workers goroutines at once, each running
// run(w, its share), and reports them as cycles/s.
func shares(b *testing.B, workers int, run func(w, share int) error) {
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		share := b.N / workers
		if w == 0 {
			share += b.N % workers
		}
		wg.Go(func() { errs[w] = run(w, share) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
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

// BenchmarkPGFloorCycle is the floor of BenchmarkPGClaimComplete: the
// least a claim+complete cycle must write on PostgreSQL by cq's contract,
// as bare SQL on cq's own schema (its indexes and triggers), with the
// same workers, slots and backlog. Per cycle, in one transaction: the
// runs claimed the cycle before end (started and ended in one update) and
// their tasks become done, in one statement; the next runnable heads move
// to doing with their runs inserted, in one statement; and the five
// events per task (task.doing, run.queued, run.running, run.succeeded,
// task.done) are inserted numbered by the counter, as cq's commit does.
// No lanes, keys, limits, leases renewed or dependencies are looked at.
func BenchmarkPGFloorCycle(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			st := pgBenchStore(b)
			fill(b, st, b.N, queue.Spec{})
			pool := postgres.DBOf(st.Backend()).Pool
			shares(b, workers, func(w, share int) error {
				return floorShare(pool, fmt.Sprintf("floor-%d", w), share, batchSlots)
			})
		})
	}
}

const (
	floorEnd = `WITH r AS (UPDATE runs SET state = 'succeeded', started_at = $1, ended_at = $1, pid = 1, pgid = 1, exit_code = 0
			WHERE id = ANY($2) AND state = 'queued' RETURNING task_id)
		UPDATE tasks t SET state = 'done', updated_at = $1, finished_at = $1, lane_head = false FROM r WHERE t.id = r.task_id AND t.state = 'doing'`
	floorClaim = `WITH picked AS MATERIALIZED (SELECT id FROM tasks WHERE queue = 'default' AND state = 'todo' AND lane_head
			ORDER BY priority, seq LIMIT $3 FOR NO KEY UPDATE SKIP LOCKED),
		moved AS (UPDATE tasks t SET state = 'doing', attempts = t.attempts + 1, updated_at = $1, todo_at = NULL
			FROM picked WHERE t.id = picked.id RETURNING t.id, t.attempts)
		INSERT INTO runs (id, task_id, attempt, state, queue, worker, lease_token, lease_expires_at, created_at)
		SELECT moved.id || '.' || moved.attempts, moved.id, moved.attempts, 'queued', 'default', $2, 'token', $1, $1 FROM moved
		RETURNING id, task_id`
	floorEvents = `WITH c AS (UPDATE event_seq SET last = last + $1 RETURNING last - $1 AS base),
		ins AS (INSERT INTO events (seq, at, kind, task_id, run_id, from_state, to_state)
			SELECT c.base + e.n, $2, e.kind, e.task_id, NULLIF(e.run_id, ''), NULLIF(e.from_state, ''), e.to_state
			FROM c, unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS e(kind, task_id, run_id, from_state, to_state, n)
			RETURNING seq)
		SELECT pg_notify('cq_floor', (SELECT max(seq) FROM ins)::text)`
)

// floorShare runs floor cycles until n tasks have ended.
func floorShare(pool *pgxpool.Pool, worker string, n, slots int) error {
	ctx := context.Background()
	var runs, tasks []string
	for done := 0; ; {
		now := queue.FormatTime(time.Now())
		want := min(slots, max(n-done-len(runs), 0))
		if len(runs) == 0 && want == 0 {
			return nil
		}
		var kind, task, run, from, to []string
		ev := func(k, t, r, f, s string) {
			kind, task, run, from, to = append(kind, k), append(task, t), append(run, r), append(from, f), append(to, s)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if len(runs) > 0 {
				if _, err := tx.Exec(ctx, floorEnd, now, runs); err != nil {
					return err
				}
				for i := range runs {
					ev("run.running", tasks[i], runs[i], "queued", "running")
					ev("run.succeeded", tasks[i], runs[i], "running", "succeeded")
					ev("task.done", tasks[i], "", "doing", "done")
				}
			}
			done += len(runs)
			runs, tasks = runs[:0], tasks[:0]
			if want > 0 {
				rows, err := tx.Query(ctx, floorClaim, now, worker, want)
				if err != nil {
					return err
				}
				var r, t string
				if _, err := pgx.ForEachRow(rows, []any{&r, &t}, func() error {
					runs, tasks = append(runs, r), append(tasks, t)
					ev("task.doing", t, "", "todo", "doing")
					ev("run.queued", t, r, "", "queued")
					return nil
				}); err != nil {
					return err
				}
			}
			if len(kind) == 0 {
				return nil
			}
			_, err := tx.Exec(ctx, floorEvents, len(kind), now, kind, task, run, from, to)
			return err
		})
		if err != nil {
			return err
		}
	}
}

// BenchmarkPGFloorEnqueue is the floor of BenchmarkPGEnqueueBatch: 1000
// tasks of the same spec per transaction stored as bare SQL on cq's
// schema, ids made beforehand, with their two events each (task.created,
// task.todo) numbered by the counter: no spec checked, no queue looked
// up. ns/op is per batch, tasks/s per task.
func BenchmarkPGFloorEnqueue(b *testing.B) {
	st := pgBenchStore(b)
	pool := postgres.DBOf(st.Backend()).Pool
	ctx := context.Background()
	sp, err := json.Marshal(spec(b, queue.Spec{}))
	if err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	n := 0
	for b.Loop() {
		now := queue.FormatTime(time.Now())
		ids := make([]string, batch)
		kind, task, from, to := make([]string, 0, 2*batch), make([]string, 0, 2*batch), make([]string, 0, 2*batch), make([]string, 0, 2*batch)
		for i := range ids {
			ids[i] = queue.NewID(time.Now())
			kind, task, from, to = append(kind, "task.created", "task.todo"), append(task, ids[i], ids[i]),
				append(from, "", "inbox"), append(to, "inbox", "todo")
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO tasks (id, state, queue, priority, seq, lane_head, spec, todo_at, created_at, updated_at)
				SELECT r.id, 'todo', 'default', 2, nextval('task_seq'), true, $2, $1, $1, $1
				FROM unnest($3::text[]) WITH ORDINALITY AS r(id, n) ORDER BY r.n`, now, string(sp), ids); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, floorEvents, len(kind), now, kind, task, make([]string, len(kind)), from, to)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		n += batch
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
}
