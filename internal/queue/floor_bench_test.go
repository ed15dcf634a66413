package queue_test

// Floors: what SQLite on this machine allows at the least for the work a
// goal measures, with none of cq's code, columns or indexes beyond those
// the contract and the other goals require. bench/goals.sh reads each one
// when its goal misses, to tell cq's own cost from the machine's: only
// floors that decide a verdict that way are kept.

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"
)

// floorSchema is the least a task, its run and its events can be: a task
// found by id and claimed from one partial index (the lane-blocked goal
// needs it), a run found by id, events ordered by seq.
const floorSchema = `
CREATE TABLE tasks (id TEXT PRIMARY KEY, state TEXT NOT NULL, queue TEXT NOT NULL,
	priority INTEGER NOT NULL, seq INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, spec TEXT NOT NULL);
CREATE INDEX tasks_claim ON tasks (queue, priority, seq) WHERE state = 'todo';
CREATE TABLE runs (id TEXT PRIMARY KEY, task_id TEXT NOT NULL, state TEXT NOT NULL,
	token TEXT NOT NULL, pid INTEGER, exit_code INTEGER);
CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, task_id TEXT, run_id TEXT,
	from_state TEXT, to_state TEXT);`

// floorDB opens a new WAL database with cq's settings (synchronous
// NORMAL, BEGIN IMMEDIATE) on one connection, with floorSchema.
func floorDB(b *testing.B) *sql.Conn {
	b.Helper()
	path := filepath.Join(b.TempDir(), "floor.db")
	d, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate&_busy_timeout=30000")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	c, err := d.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.ExecContext(context.Background(), floorSchema); err != nil {
		b.Fatal(err)
	}
	return c
}

// floorSpec is a spec of the size cq stores for a true task.
var floorSpec = `{"cmd":["true"],"queue":"default","priority":"P2","cwd":"/home/user/work"}`

// floorPer is how many tasks one INSERT stores, as cq's batch does.
const floorPer = 500

// floorFiller stores tasks with their events through two prepared
// multi-row INSERTs of floorPer tasks, binding only what varies: ?1 is
// the time, then per task its id, seq and spec.
type floorFiller struct {
	c             *sql.Conn
	tasks, events *sql.Stmt
	args          []any
}

// floorTimes adds to floorSchema's tables the times cq's JSON gives
// every task (created_at, updated_at) and every event (at).
const floorTimes = `ALTER TABLE tasks ADD COLUMN created_at TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN updated_at TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN at TEXT NOT NULL DEFAULT '';`

// The rows floorFiller writes, without and with the times.
const (
	floorTaskRow      = "(?%d,'todo','default',2,?%d,?%d)"
	floorEventRows    = "('task.created',?%d,NULL,'inbox'),('task.todo',?%d,'inbox','todo')"
	floorTimedTaskRow = "(?%d,'todo','default',2,?%d,?%d,?1,?1)"
	timedEventRows    = "(?1,'task.created',?%d,NULL,'inbox'),(?1,'task.todo',?%d,'inbox','todo')"
)

// newFloorFiller prepares the INSERTs into floorSchema's tables; timed
// adds floorTimes first and writes the times too.
func newFloorFiller(b *testing.B, c *sql.Conn, timed bool) *floorFiller {
	b.Helper()
	var tq, eq strings.Builder
	var taskRow, eventRows string
	if timed {
		if _, err := c.ExecContext(context.Background(), floorTimes); err != nil {
			b.Fatal(err)
		}
		taskRow, eventRows = floorTimedTaskRow, timedEventRows
		tq.WriteString("INSERT INTO tasks (id, state, queue, priority, seq, spec, created_at, updated_at) VALUES ")
		eq.WriteString("INSERT INTO events (at, kind, task_id, from_state, to_state) VALUES ")
	} else {
		taskRow, eventRows = floorTaskRow, floorEventRows
		tq.WriteString("INSERT INTO tasks (id, state, queue, priority, seq, spec) VALUES ")
		eq.WriteString("INSERT INTO events (kind, task_id, from_state, to_state) VALUES ")
	}
	for i := range floorPer {
		if i > 0 {
			tq.WriteByte(',')
			eq.WriteByte(',')
		}
		id := 2 + 3*i
		fmt.Fprintf(&tq, taskRow, id, id+1, id+2)
		fmt.Fprintf(&eq, eventRows, id, id)
	}
	f := &floorFiller{c: c, args: make([]any, 1+3*floorPer)}
	var err error
	ctx := context.Background()
	if f.tasks, err = c.PrepareContext(ctx, tq.String()); err != nil {
		b.Fatal(err)
	}
	if f.events, err = c.PrepareContext(ctx, eq.String()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.tasks.Close(); f.events.Close() })
	return f
}

// fill commits n tasks (a multiple of floorPer) numbered from "from", in
// one transaction.
func (f *floorFiller) fill(b *testing.B, from, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := f.c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		b.Fatal(err)
	}
	at := "2026-11-22T17:00:00.000Z"
	for done := 0; done < n; done += floorPer {
		f.args[0] = at
		for i := range floorPer {
			id := fmt.Sprintf("t%012d", from+done+i)
			f.args[1+3*i], f.args[2+3*i], f.args[3+3*i] = id, from+done+i, floorSpec
		}
		if _, err := f.tasks.ExecContext(ctx, f.args...); err != nil {
			b.Fatal(err)
		}
		// The events' last parameter is the last task's id.
		if _, err := f.events.ExecContext(ctx, f.args[:3*floorPer-1]...); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := f.c.ExecContext(ctx, "COMMIT"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFloorEnqueueBatchTimed is the floor of BenchmarkEnqueueBatch
// and decides the batch-enqueue goal's verdict: per op 1000 tasks
// committed at once, each a task row of cq's size with its two events
// (created, and the gateway step into todo) and the times every task and
// event carries in cq's JSON (a task's created_at and updated_at, each
// event's at, 24 characters each as cq stores them), with floorSchema's
// two indexes and nothing else. It is the least a batch enqueue that
// keeps the contract writes, with no Go work at all: any implementation
// runs below it.
func BenchmarkFloorEnqueueBatchTimed(b *testing.B) {
	f := newFloorFiller(b, floorDB(b), true)
	b.ResetTimer()
	for i := range b.N {
		f.fill(b, i*1000, 1000)
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "tasks/s")
}

// floorSlots is the runs in flight of BenchmarkFloorWorkerCycle, as many as
// BenchmarkClaimCompleteBatched's.
const floorSlots = batchSlots

// BenchmarkFloorWorkerCycle is the floor of BenchmarkWorkerCycle at
// floorSlots runs in flight, over floorSchema's tables with a 1k backlog,
// and decides the claim+complete goal's verdict: as in cq worker when its
// tasks end before their starts are recorded on their own, one commit
// per cycle records the starts of the runs in flight, then their ends,
// then claims as many tasks (their heads read at once). Each step's rows
// are written with one statement (an UPDATE of all the ids, a multi-row
// INSERT), checking that every row changed, as cq's store does. One op is
// one task run from claim to end.
func BenchmarkFloorWorkerCycle(b *testing.B) {
	c := floorDB(b)
	ctx := context.Background()
	f := newFloorFiller(b, c, false)
	for n := 0; n < 1000+b.N+floorSlots; n += floorPer {
		f.fill(b, n, floorPer)
	}
	checkpointed(b, c)
	exec := func(q string, want int, args ...any) {
		res, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); want >= 0 && n != int64(want) {
			b.Fatalf("%s: %d rows, want %d", q, n, want)
		}
	}
	list := func(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }
	rows := func(row string, n int) string { return strings.TrimSuffix(strings.Repeat(row+",", n), ",") }
	type run struct{ task, id string }
	var inflight []run
	ids := func(pick func(run) string) []any {
		out := make([]any, len(inflight))
		for i, r := range inflight {
			out[i] = pick(r)
		}
		return out
	}
	pairs := func() []any {
		out := make([]any, 0, 2*len(inflight))
		for _, r := range inflight {
			out = append(out, r.task, r.id)
		}
		return out
	}
	runs := 0
	b.ResetTimer()
	for done := 0; done <= b.N; {
		exec("BEGIN IMMEDIATE", -1)
		// The starts of the runs in flight, then their ends.
		if k := len(inflight); k > 0 {
			runIDs, taskIDs := ids(func(r run) string { return r.id }), ids(func(r run) string { return r.task })
			exec(`UPDATE runs SET state = 'running', pid = 1 WHERE id IN (`+list(k)+`) AND state = 'queued' AND token = 'tok'`, k, runIDs...)
			exec(`INSERT INTO events (kind, task_id, run_id, from_state, to_state) VALUES `+rows("('run.running', ?, ?, 'queued', 'running')", k), k, pairs()...)
			exec(`UPDATE runs SET state = 'succeeded', exit_code = 0 WHERE id IN (`+list(k)+`) AND state = 'running' AND token = 'tok'`, k, runIDs...)
			exec(`UPDATE tasks SET state = 'done' WHERE id IN (`+list(k)+`) AND +state = 'doing'`, k, taskIDs...)
			exec(`INSERT INTO events (kind, task_id, run_id, from_state, to_state) VALUES `+rows("('task.done', ?, ?, 'doing', 'done')", k), k, pairs()...)
			done += k
		}
		// Claim as many: the heads in one read, then the CAS and the runs.
		inflight = inflight[:0]
		want := min(floorSlots, b.N-done)
		if want > 0 {
			rs, err := c.QueryContext(ctx, `SELECT id FROM tasks WHERE state = 'todo' AND queue = 'default' ORDER BY priority, seq LIMIT ?`, want)
			if err != nil {
				b.Fatal(err)
			}
			for rs.Next() {
				var t string
				if err := rs.Scan(&t); err != nil {
					b.Fatal(err)
				}
				inflight = append(inflight, run{task: t, id: fmt.Sprintf("r%012d", runs)})
				runs++
			}
			rs.Close()
			k := len(inflight)
			newRuns := make([]any, 0, 2*k)
			for _, r := range inflight {
				newRuns = append(newRuns, r.id, r.task)
			}
			exec(`UPDATE tasks SET state = 'doing', attempts = attempts + 1 WHERE id IN (`+list(k)+`) AND +state = 'todo'`, k, ids(func(r run) string { return r.task })...)
			exec(`INSERT INTO runs (id, task_id, state, token) VALUES `+rows("(?, ?, 'queued', 'tok')", k), k, newRuns...)
			exec(`INSERT INTO events (kind, task_id, run_id, from_state, to_state) VALUES `+rows("('task.doing', ?, ?, 'todo', 'doing')", k), k, pairs()...)
		}
		exec("COMMIT", -1)
		if len(inflight) == 0 {
			break
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
