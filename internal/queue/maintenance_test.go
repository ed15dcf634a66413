package queue_test

// Retention (cq cleanup) and the store's maintenance steps
// (start timeouts, the promotion and cancel safety nets, wait warnings,
// system_state), driven by an injected clock: time is moved, never waited
// for. Helpers here are prefixed mnt; health_test.go uses them too.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cqclock "github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// mntT0 is the tests' epoch.
var mntT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const mntDay = 24 * time.Hour

type mntEnv struct {
	t   *testing.T
	st  *queue.Store
	clk *cqclock.Fake
	ctx context.Context
}

func mntSetup(t *testing.T) *mntEnv {
	t.Helper()
	d := storetest.OpenSQLite(t, "")
	clk := cqclock.NewFake(mntT0)
	st := queue.New(d.Store())
	st.Now = clk.Now
	st.Boot = cqclock.Following(clk.Now)
	return &mntEnv{t: t, st: st, clk: clk, ctx: context.Background()}
}

// add creates and enqueues a task (command true unless given).
func (e *mntEnv) add(sp queue.Spec) string {
	e.t.Helper()
	if sp.Cmd == nil && sp.Shell == "" {
		sp.Cmd = []string{"true"}
	}
	n, err := sp.Normalize()
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.st.Create(e.ctx, []queue.Spec{n}, queue.CreateOptions{Enqueue: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return res[0].ID
}

// claimQ claims from one queue; the claim must be of task want.
func (e *mntEnv) claimQ(q, want string, lease time.Duration) *queue.Claimed {
	e.t.Helper()
	c, err := e.st.Claim(e.ctx, queue.ClaimParams{Worker: "w-test", Host: "h-test", Queues: []string{q}, Lease: lease})
	if err != nil {
		e.t.Fatal(err)
	}
	if c == nil || (want != "" && c.TaskID != want) {
		e.t.Fatalf("claim from %s = %+v, want task %s", q, c, want)
	}
	return c
}

func (e *mntEnv) start(c *queue.Claimed) {
	e.t.Helper()
	if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err != nil {
		e.t.Fatal(err)
	}
}

// finish ends a running run with state (exit code 0 for succeeded, else
// 1) and returns the task's new state.
func (e *mntEnv) finish(c *queue.Claimed, state string) string {
	e.t.Helper()
	code := 1
	if state == queue.RunSucceeded {
		code = 0
	}
	ts, err := e.st.FinishRun(e.ctx, c.RunID, c.Token, queue.Outcome{State: state, ExitCode: &code})
	if err != nil {
		e.t.Fatal(err)
	}
	return ts
}

// makeDone, makeFailed and makeCancelled create a task that ends in that
// state now, through the API (queue "term", used for nothing else).
func (e *mntEnv) makeDone(id string) string {
	e.t.Helper()
	e.add(queue.Spec{ID: id, Queue: "term"})
	c := e.claimQ("term", id, time.Hour)
	e.start(c)
	if got := e.finish(c, queue.RunSucceeded); got != queue.TaskDone {
		e.t.Fatalf("task %s is %s, want done", id, got)
	}
	return c.RunID
}

func (e *mntEnv) makeFailed(id string) string {
	e.t.Helper()
	e.add(queue.Spec{ID: id, Queue: "term"})
	c := e.claimQ("term", id, time.Hour)
	e.start(c)
	if got := e.finish(c, queue.RunFailed); got != queue.TaskFailed {
		e.t.Fatalf("task %s is %s, want failed", id, got)
	}
	return c.RunID
}

func (e *mntEnv) makeCancelled(id string) {
	e.t.Helper()
	e.add(queue.Spec{ID: id, Queue: "term"})
	if _, st, err := e.st.Cancel(e.ctx, id, ""); err != nil || st != queue.TaskCancelled {
		e.t.Fatalf("cancel %s: %s %v", id, st, err)
	}
}

func (e *mntEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := sqlite.DBOf(e.st.Backend()).SQL.ExecContext(e.ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *mntEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRowContext(e.ctx, q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *mntEnv) str(q string, args ...any) string {
	e.t.Helper()
	var s sql.NullString
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRowContext(e.ctx, q, args...).Scan(&s); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	if !s.Valid {
		return "NULL"
	}
	return s.String
}

// ids returns the first column of a query, sorted.
func (e *mntEnv) ids(q string, args ...any) []string {
	e.t.Helper()
	rows, err := sqlite.DBOf(e.st.Backend()).SQL.QueryContext(e.ctx, q, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func (e *mntEnv) state(id string) string {
	e.t.Helper()
	tk, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return tk.State
}

// dump renders a task's rows, its runs and its events, to compare
// before and after.
func (e *mntEnv) dump(id string) string {
	e.t.Helper()
	var sb strings.Builder
	for _, q := range []string{
		`SELECT * FROM tasks WHERE id = ?`,
		`SELECT * FROM runs WHERE task_id = ? ORDER BY attempt`,
		`SELECT * FROM events WHERE task_id = ? ORDER BY seq`,
	} {
		queue.WriteRows(e.t, &sb, sqlite.DBOf(e.st.Backend()).SQL, q, id)
	}
	return sb.String()
}

// deleteAll runs DeleteExpired for every terminal state until nothing is
// left, in batches of limit, and returns the counts and the run ids.
func (e *mntEnv) deleteAll(r queue.Retention, limit int) (map[string]int, []string) {
	e.t.Helper()
	counts := map[string]int{}
	var runs []string
	for _, st := range queue.CleanupStates {
		for i := 0; ; i++ {
			n, ids, err := e.st.DeleteExpired(e.ctx, st, r, limit)
			if err != nil {
				e.t.Fatal(err)
			}
			if n > limit {
				e.t.Fatalf("DeleteExpired(%s, limit %d) deleted %d", st, limit, n)
			}
			counts[st] += n
			runs = append(runs, ids...)
			if n == 0 {
				break
			}
			if i > 1000 {
				e.t.Fatal("DeleteExpired never returns 0")
			}
		}
	}
	e.sweep()
	return counts, runs
}

// sweep runs SweepEvents until no window is left.
func (e *mntEnv) sweep() {
	e.t.Helper()
	for i := 0; ; i++ {
		_, more, err := e.st.SweepEvents(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if !more {
			return
		}
		if i > 100000 {
			e.t.Fatal("SweepEvents never ends")
		}
	}
}

func (e *mntEnv) taskIDs() []string {
	e.t.Helper()
	return e.ids(`SELECT id FROM tasks`)
}

func mntCounts(done, cancelled, failed int) map[string]int {
	return map[string]int{queue.TaskDone: done, queue.TaskCancelled: cancelled, queue.TaskFailed: failed}
}

func mntEqualCounts(a, b map[string]int) bool {
	for _, s := range queue.CleanupStates {
		if a[s] != b[s] {
			return false
		}
	}
	return true
}

// TestRetentionDefaults walks the clock past each default retention (done
// 30 days, cancelled 7, failed 14, by finish time) and checks that
// exactly the expired tasks go, and that an age equal to the retention is
// not yet "older than" it.
func TestRetentionDefaults(t *testing.T) {
	e := mntSetup(t)
	// Finished at T0.
	e.makeDone("d-old")
	e.makeCancelled("c-old")
	e.makeFailed("f-old")
	// Created at T0, finished 20 days later: retention counts from the
	// finish, not from creation.
	e.add(queue.Spec{ID: "d-late", Queue: "late"})
	late := e.claimQ("late", "d-late", 1000*time.Hour)
	e.start(late)
	// Live tasks, never deleted however old.
	e.add(queue.Spec{ID: "live-todo", Queue: "live"})
	e.add(queue.Spec{ID: "live-held", Queue: "live", Hold: true})
	e.add(queue.Spec{ID: "live-doing", Queue: "doing"})
	e.claimQ("doing", "live-doing", 1000*time.Hour)
	if _, err := e.st.Create(e.ctx, []queue.Spec{mntNorm(t, queue.Spec{ID: "live-inbox"})}, queue.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.clk.Set(mntT0.Add(time.Hour))
	e.makeDone("d-new")
	e.makeCancelled("c-new")
	e.makeFailed("f-new")

	e.clk.Set(mntT0.Add(20 * mntDay))
	if got := e.finish(late, queue.RunSucceeded); got != queue.TaskDone {
		t.Fatalf("d-late is %s", got)
	}

	live := []string{"live-doing", "live-held", "live-inbox", "live-todo"}
	steps := []struct {
		at      time.Duration
		deleted map[string]int
		left    []string // terminal tasks left
	}{
		{7 * mntDay, mntCounts(0, 0, 0), []string{"c-new", "c-old", "d-late", "d-new", "d-old", "f-new", "f-old"}},
		{7*mntDay + time.Millisecond, mntCounts(0, 1, 0), []string{"c-new", "d-late", "d-new", "d-old", "f-new", "f-old"}},
		{7*mntDay + time.Hour, mntCounts(0, 0, 0), []string{"c-new", "d-late", "d-new", "d-old", "f-new", "f-old"}},
		{7*mntDay + time.Hour + time.Millisecond, mntCounts(0, 1, 0), []string{"d-late", "d-new", "d-old", "f-new", "f-old"}},
		{14 * mntDay, mntCounts(0, 0, 0), []string{"d-late", "d-new", "d-old", "f-new", "f-old"}},
		{14*mntDay + time.Millisecond, mntCounts(0, 0, 1), []string{"d-late", "d-new", "d-old", "f-new"}},
		{14*mntDay + time.Hour + time.Millisecond, mntCounts(0, 0, 1), []string{"d-late", "d-new", "d-old"}},
		{30 * mntDay, mntCounts(0, 0, 0), []string{"d-late", "d-new", "d-old"}},
		{30*mntDay + time.Millisecond, mntCounts(1, 0, 0), []string{"d-late", "d-new"}},
		{30*mntDay + time.Hour + time.Millisecond, mntCounts(1, 0, 0), []string{"d-late"}},
		{50 * mntDay, mntCounts(0, 0, 0), []string{"d-late"}},
		{50*mntDay + time.Millisecond, mntCounts(1, 0, 0), nil},
		{500 * mntDay, mntCounts(0, 0, 0), nil},
	}
	for _, s := range steps {
		e.clk.Set(mntT0.Add(s.at))
		r := queue.DefaultRetention()
		would, err := e.st.ExpiredCounts(e.ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !mntEqualCounts(would, s.deleted) {
			t.Errorf("at T0+%v: ExpiredCounts = %v, want %v", s.at, would, s.deleted)
		}
		got, _ := e.deleteAll(r, 500)
		if !mntEqualCounts(got, s.deleted) {
			t.Errorf("at T0+%v: deleted %v, want %v", s.at, got, s.deleted)
		}
		want := append(slices.Clone(s.left), live...)
		sort.Strings(want)
		if ids := e.taskIDs(); !slices.Equal(ids, want) {
			t.Errorf("at T0+%v: tasks left %v, want %v", s.at, ids, want)
		}
	}
}

func mntNorm(t *testing.T, sp queue.Spec) queue.Spec {
	t.Helper()
	if sp.Cmd == nil {
		sp.Cmd = []string{"true"}
	}
	n, err := sp.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetentionCustomDurations: cq cleanup's --done/--cancelled/--failed,
// 0s included (0 keeps nothing that has finished).
func TestRetentionCustomDurations(t *testing.T) {
	e := mntSetup(t)
	e.makeDone("d")
	e.makeCancelled("c")
	e.makeFailed("f")
	r := queue.Retention{Done: time.Hour, Cancelled: 0, Failed: 2*time.Hour + 30*time.Minute}
	for _, s := range []struct {
		at   time.Duration
		want map[string]int
		left []string
	}{
		{time.Millisecond, mntCounts(0, 1, 0), []string{"d", "f"}},
		{time.Hour, mntCounts(0, 0, 0), []string{"d", "f"}},
		{time.Hour + time.Millisecond, mntCounts(1, 0, 0), []string{"f"}},
		{2*time.Hour + 30*time.Minute, mntCounts(0, 0, 0), []string{"f"}},
		{2*time.Hour + 30*time.Minute + time.Millisecond, mntCounts(0, 0, 1), nil},
	} {
		e.clk.Set(mntT0.Add(s.at))
		got, _ := e.deleteAll(r, 500)
		if !mntEqualCounts(got, s.want) {
			t.Errorf("at T0+%v: deleted %v, want %v", s.at, got, s.want)
		}
		if ids := e.taskIDs(); !slices.Equal(ids, s.left) {
			t.Errorf("at T0+%v: tasks left %v, want %v", s.at, ids, s.left)
		}
	}

	// All three at 0s: every finished task goes, nothing live does.
	e2 := mntSetup(t)
	e2.makeDone("d")
	e2.makeCancelled("c")
	e2.makeFailed("f")
	e2.add(queue.Spec{ID: "todo"})
	e2.clk.Add(time.Millisecond)
	got, _ := e2.deleteAll(queue.Retention{}, 500)
	if !mntEqualCounts(got, mntCounts(1, 1, 1)) {
		t.Errorf("0s everywhere: deleted %v, want one of each", got)
	}
	if ids := e2.taskIDs(); !slices.Equal(ids, []string{"todo"}) {
		t.Errorf("0s everywhere: left %v, want [todo]", ids)
	}
}

// TestRetentionDeletesRunsAndEventsOfThoseTasksOnly: a deleted task takes
// its runs, its dependency edges and its events with it; the events of
// other tasks and of queues stay, and so do their runs.
func TestRetentionDeletesRunsAndEventsOfThoseTasksOnly(t *testing.T) {
	e := mntSetup(t)
	oldRun := e.makeDone("old")
	e.add(queue.Spec{ID: "old-dep", Queue: "term", After: []string{"old"}})
	if _, _, err := e.st.Cancel(e.ctx, "old-dep", ""); err != nil {
		t.Fatal(err)
	}
	two := 2
	if err := e.st.SetQueue(e.ctx, "other", queue.QueueSettings{Concurrency: &two}); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(mntT0.Add(29 * mntDay))
	keepRun := e.makeDone("keep")
	e.add(queue.Spec{ID: "keep-live", After: []string{"keep"}})

	before := map[string]string{"keep": e.dump("keep"), "keep-live": e.dump("keep-live")}
	queueEvents := e.count(`SELECT COUNT(*) FROM events WHERE task_id IS NULL`)
	if queueEvents == 0 {
		t.Fatal("setup: no queue event")
	}
	if e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'old'`) < 4 || e.count(`SELECT COUNT(*) FROM runs WHERE task_id = 'old'`) != 1 {
		t.Fatal("setup: old has no history")
	}

	e.clk.Set(mntT0.Add(30*mntDay + time.Millisecond))
	got, runs := e.deleteAll(queue.DefaultRetention(), 500)
	if !mntEqualCounts(got, mntCounts(1, 1, 0)) {
		t.Fatalf("deleted %v, want old and old-dep", got)
	}
	if !slices.Equal(runs, []string{oldRun}) {
		t.Errorf("run ids returned %v, want [%s]", runs, oldRun)
	}
	for _, q := range []string{
		`SELECT COUNT(*) FROM tasks WHERE id IN ('old','old-dep')`,
		`SELECT COUNT(*) FROM runs WHERE task_id IN ('old','old-dep')`,
		`SELECT COUNT(*) FROM events WHERE task_id IN ('old','old-dep')`,
		`SELECT COUNT(*) FROM task_deps WHERE task_id IN ('old','old-dep')`,
	} {
		if n := e.count(q); n != 0 {
			t.Errorf("%s = %d after cleanup, want 0", q, n)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id IS NULL`); n != queueEvents {
		t.Errorf("queue events: %d after cleanup, want %d", n, queueEvents)
	}
	for id, b := range before {
		if a := e.dump(id); a != b {
			t.Errorf("task %s changed by cleanup:\nbefore:\n%s\nafter:\n%s", id, b, a)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM runs WHERE id = ?`, keepRun); n != 1 {
		t.Errorf("run of kept task gone")
	}
}

// TestRetentionKeepsAFailedTaskWholeHistory: a failed task inside its
// retention keeps every run and every event; at expiry all of it goes.
func TestRetentionKeepsAFailedTaskWholeHistory(t *testing.T) {
	e := mntSetup(t)
	two := 2
	e.add(queue.Spec{ID: "flaky", Queue: "f", Retries: &two})
	for attempt := 1; attempt <= 3; attempt++ {
		c := e.claimQ("f", "flaky", time.Hour)
		e.start(c)
		got := e.finish(c, queue.RunFailed)
		if attempt < 3 {
			if got != queue.TaskBlocked {
				t.Fatalf("attempt %d: task %s, want blocked", attempt, got)
			}
			e.clk.Add(2 * time.Hour) // past any backoff
			if n, err := e.st.PromoteDue(e.ctx); err != nil || n != 1 {
				t.Fatalf("PromoteDue = %d, %v", n, err)
			}
		} else if got != queue.TaskFailed {
			t.Fatalf("attempt 3: task %s, want failed", got)
		}
	}
	finished := e.clk.Now()
	before := e.dump("flaky")
	if n := e.count(`SELECT COUNT(*) FROM runs WHERE task_id = 'flaky'`); n != 3 {
		t.Fatalf("setup: %d runs, want 3", n)
	}
	for _, at := range []time.Duration{time.Millisecond, 13 * mntDay, 14 * mntDay} {
		e.clk.Set(finished.Add(at))
		if got, _ := e.deleteAll(queue.DefaultRetention(), 500); !mntEqualCounts(got, mntCounts(0, 0, 0)) {
			t.Errorf("finished+%v: deleted %v, want nothing", at, got)
		}
		if after := e.dump("flaky"); after != before {
			t.Errorf("finished+%v: history changed:\nbefore:\n%s\nafter:\n%s", at, before, after)
		}
	}
	e.clk.Set(finished.Add(14*mntDay + time.Millisecond))
	if got, _ := e.deleteAll(queue.DefaultRetention(), 500); !mntEqualCounts(got, mntCounts(0, 0, 1)) {
		t.Errorf("at expiry: deleted %v, want the failed task", got)
	}
	if after := e.dump("flaky"); after != "" {
		t.Errorf("at expiry: left behind:\n%s", after)
	}
}

// TestRetentionSparesARetriedTask: a failed task an operator retried is
// live again and stays, however long ago it had failed.
func TestRetentionSparesARetriedTask(t *testing.T) {
	e := mntSetup(t)
	e.makeFailed("f")
	e.clk.Set(mntT0.Add(13 * mntDay))
	if _, st, err := e.st.Retry(e.ctx, "f", ""); err != nil || st != queue.TaskTodo {
		t.Fatalf("retry: %s %v", st, err)
	}
	e.clk.Set(mntT0.Add(100 * mntDay))
	if got, _ := e.deleteAll(queue.Retention{}, 500); !mntEqualCounts(got, mntCounts(0, 0, 0)) {
		t.Errorf("deleted %v, want nothing", got)
	}
	if e.state("f") != queue.TaskTodo || e.count(`SELECT COUNT(*) FROM runs WHERE task_id = 'f'`) != 1 {
		t.Error("the retried task or its run is gone")
	}
}

// TestDeleteExpiredBatches: each call deletes at most limit tasks, with
// their run ids, until it reports 0.
func TestDeleteExpiredBatches(t *testing.T) {
	e := mntSetup(t)
	want := map[string]bool{}
	for i := range 5 {
		want[e.makeDone(fmt.Sprintf("d%d", i))] = true
	}
	e.clk.Add(time.Millisecond)
	r := queue.Retention{}
	var sizes []int
	seen := map[string]bool{}
	for {
		n, runs, err := e.st.DeleteExpired(e.ctx, queue.TaskDone, r, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != n {
			t.Errorf("batch of %d tasks returned %d run ids", n, len(runs))
		}
		for _, id := range runs {
			seen[id] = true
		}
		sizes = append(sizes, n)
		if n == 0 || len(sizes) > 10 {
			break
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 1, 0}) {
		t.Errorf("batch sizes %v, want [2 2 1 0]", sizes)
	}
	if len(seen) != len(want) {
		t.Errorf("run ids %v, want %v", seen, want)
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("run %s not reported", id)
		}
	}
}

// TestTimeoutQueuedRuns: a run claimed but not started within its queue's
// start timeout ends timeout (transient class: the task is blocked for a
// retry and spends a transient budget); its worker's start then loses.
func TestTimeoutQueuedRuns(t *testing.T) {
	e := mntSetup(t)
	st := time.Minute
	if err := e.st.SetQueue(e.ctx, "q", queue.QueueSettings{StartTimeout: &st}); err != nil {
		t.Fatal(err)
	}
	e.add(queue.Spec{ID: "slow-start", Queue: "q"})
	c := e.claimQ("q", "slow-start", time.Hour)
	e.add(queue.Spec{ID: "other", Queue: "default"}) // default queue: 10m
	c2 := e.claimQ("default", "other", time.Hour)

	e.clk.Add(time.Minute)
	if n, err := e.st.TimeoutQueuedRuns(e.ctx); err != nil || n != 0 {
		t.Fatalf("at exactly the start timeout: %d, %v; want 0", n, err)
	}
	e.clk.Add(time.Millisecond)
	if n, err := e.st.TimeoutQueuedRuns(e.ctx); err != nil || n != 1 {
		t.Fatalf("past the start timeout: %d, %v; want 1", n, err)
	}
	if s, _ := e.st.RunState(e.ctx, c.RunID); s != queue.RunTimeout {
		t.Errorf("run is %s, want timeout", s)
	}
	if s, _ := e.st.RunState(e.ctx, c2.RunID); s != queue.RunQueued {
		t.Errorf("run of the default queue is %s, want queued (10m start timeout)", s)
	}
	if got := e.str(`SELECT state || ' ' || blocked_reason || ' ' || fails_transient || ' ' || fails_timeout || ' ' || fails_other FROM tasks WHERE id = 'slow-start'`); got != "blocked retry 1 0 0" {
		t.Errorf("task: %q, want blocked for retry with one transient failure", got)
	}
	if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err == nil || !queue.IsConflict(err) {
		t.Errorf("start after the start timeout: %v, want a conflict", err)
	}
	if n, err := e.st.TimeoutQueuedRuns(e.ctx); err != nil || n != 0 {
		t.Errorf("second pass: %d, %v; want 0", n, err)
	}
}

// TestPromoteReadySafetyNet: a blocked task that nothing blocks (a state
// the event-driven promotions should never leave, made here with SQL)
// goes to todo; held, scheduled or dependent tasks stay.
func TestPromoteReadySafetyNet(t *testing.T) {
	e := mntSetup(t)
	e.add(queue.Spec{ID: "stuck", Hold: true})
	e.add(queue.Spec{ID: "held", Hold: true})
	e.add(queue.Spec{ID: "later", Delay: "1h"})
	e.add(queue.Spec{ID: "dep"})
	e.add(queue.Spec{ID: "child", After: []string{"dep"}})
	e.exec(`UPDATE tasks SET hold = 0 WHERE id = 'stuck'`) // hold lost, still blocked
	e.clk.Add(time.Minute)
	n, err := e.st.PromoteReady(e.ctx)
	if err != nil || n != 1 {
		t.Fatalf("PromoteReady = %d, %v; want 1", n, err)
	}
	want := map[string]string{"stuck": "todo", "held": "blocked", "later": "blocked", "dep": "todo", "child": "blocked"}
	for id, s := range want {
		if got := e.state(id); got != s {
			t.Errorf("%s is %s, want %s", id, got, s)
		}
	}
	if got := e.str(`SELECT todo_at FROM tasks WHERE id = 'stuck'`); got != queue.FormatTime(e.clk.Now()) {
		t.Errorf("todo_at = %s, want now", got)
	}
	if n, err := e.st.PromoteReady(e.ctx); err != nil || n != 0 {
		t.Errorf("second call = %d, %v; want 0", n, err)
	}
}

// TestCancelOrphansSafetyNet: a task still waiting on a dependency that
// ended failed (a cascade that never ran, made with SQL) is cancelled with
// the reason, and so are its own dependents.
func TestCancelOrphansSafetyNet(t *testing.T) {
	e := mntSetup(t)
	e.add(queue.Spec{ID: "a", Queue: "x"})
	e.add(queue.Spec{ID: "b", After: []string{"a"}})
	e.add(queue.Spec{ID: "c", After: []string{"b"}})
	e.add(queue.Spec{ID: "z", Queue: "x"})
	e.add(queue.Spec{ID: "y", After: []string{"z"}})
	e.exec(`UPDATE tasks SET state = 'failed', finished_at = ?, lane_head = 0 WHERE id = 'a'`, queue.FormatTime(e.clk.Now()))
	n, err := e.st.CancelOrphans(e.ctx)
	if err != nil || n < 1 {
		t.Fatalf("CancelOrphans = %d, %v", n, err)
	}
	for id, s := range map[string]string{"a": "failed", "b": "cancelled", "c": "cancelled", "z": "todo", "y": "blocked"} {
		if got := e.state(id); got != s {
			t.Errorf("%s is %s, want %s", id, got, s)
		}
	}
	if got := e.str(`SELECT reason FROM tasks WHERE id = 'b'`); !strings.Contains(got, "dependency a failed") {
		t.Errorf("b's reason %q, want it to name dependency a failed", got)
	}
	if n, err := e.st.CancelOrphans(e.ctx); err != nil || n != 0 {
		t.Errorf("second call = %d, %v; want 0", n, err)
	}
}

// TestDependencySafetyNetsReadWindows: with more dependency edges than
// one pass reads (queue.DepWindowEdges), each pass of the count heal and
// of the orphan scan reads the next window, and successive passes reach
// every edge: stale counts of tasks beyond the first window heal and
// orphans beyond it are cancelled.
func TestDependencySafetyNetsReadWindows(t *testing.T) {
	e := mntSetup(t)
	e.add(queue.Spec{ID: "root"})
	e.add(queue.Spec{ID: "bad"})
	n := queue.DepWindowEdges*2 + 10
	specs := make([]queue.Spec, 0, n+1)
	for i := range n {
		specs = append(specs, queue.Spec{ID: fmt.Sprintf("k%06d", i), Cmd: []string{"true"}, After: []string{"root"}})
	}
	// The orphan sorts after every window but the last.
	specs = append(specs, queue.Spec{ID: "z-orphan", Cmd: []string{"true"}, After: []string{"bad"}})
	for i := range specs {
		sp, err := specs[i].Normalize()
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = sp
	}
	if _, err := e.st.Create(e.ctx, specs, queue.CreateOptions{Enqueue: true}); err != nil {
		t.Fatal(err)
	}
	// Events the cascade never saw: root done and bad failed, by SQL.
	e.exec(`UPDATE tasks SET state = 'done', finished_at = ?, lane_head = 0 WHERE id = 'root'`, queue.FormatTime(e.clk.Now()))
	e.exec(`UPDATE tasks SET state = 'failed', finished_at = ?, lane_head = 0 WHERE id = 'bad'`, queue.FormatTime(e.clk.Now()))
	cancelled := 0
	for pass := 1; pass <= 3; pass++ {
		k, err := e.st.CancelOrphans(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancelled += k
		if pass < 3 && cancelled != 0 {
			t.Fatalf("the orphan, in the third window, was cancelled by pass %d", pass)
		}
	}
	if cancelled != 1 || e.state("z-orphan") != queue.TaskCancelled {
		t.Errorf("after three passes %d cancelled, the orphan is %s; want it cancelled", cancelled, e.state("z-orphan"))
	}
	stale := func() int { return e.count(`SELECT COUNT(*) FROM tasks WHERE id LIKE 'k%' AND deps_left > 0`) }
	if _, err := e.st.PromoteReady(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := stale(); got != n-queue.DepWindowEdges {
		t.Errorf("after one heal pass %d stale counts, want %d (one window healed)", got, n-queue.DepWindowEdges)
	}
	for range 3 {
		if _, err := e.st.PromoteReady(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := stale(); got != 0 {
		t.Errorf("after four heal passes %d stale counts, want 0", got)
	}
}

// TestWarnWaitingOnceUntilRequeued: one task.waiting event per entry into
// todo, counted from that entry, by the queue's warn-after; the task is
// never moved for it.
func TestWarnWaitingOnceUntilRequeued(t *testing.T) {
	e := mntSetup(t)
	hour := time.Hour
	if err := e.st.SetQueue(e.ctx, "patient", queue.QueueSettings{WarnAfter: &hour}); err != nil {
		t.Fatal(err)
	}
	e.add(queue.Spec{ID: "w"})
	e.add(queue.Spec{ID: "p", Queue: "patient"})
	warnings := func(id string) int {
		return e.count(`SELECT COUNT(*) FROM events WHERE task_id = ? AND kind = 'task.waiting'`, id)
	}
	e.clk.Add(10 * time.Minute)
	if n, err := e.st.WarnWaiting(e.ctx); err != nil || n != 0 {
		t.Fatalf("at exactly warn-after: %d, %v; want 0", n, err)
	}
	e.clk.Add(time.Millisecond)
	if n, err := e.st.WarnWaiting(e.ctx); err != nil || n != 1 {
		t.Fatalf("past warn-after: %d, %v; want 1", n, err)
	}
	for range 3 {
		e.clk.Add(time.Hour)
		if _, err := e.st.WarnWaiting(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if warnings("w") != 1 || e.state("w") != queue.TaskTodo {
		t.Errorf("w: %d warnings, state %s; want 1, todo", warnings("w"), e.state("w"))
	}
	if warnings("p") != 1 {
		t.Errorf("p (warn-after 1h): %d warnings, want 1", warnings("p"))
	}
	// hold → release: a new entry into todo.
	if _, _, err := e.st.Hold(e.ctx, "w", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.Release(e.ctx, "w", ""); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(10 * time.Minute)
	if _, err := e.st.WarnWaiting(e.ctx); err != nil {
		t.Fatal(err)
	}
	if warnings("w") != 1 {
		t.Errorf("w warned again %v after re-entering todo, before warn-after", 10*time.Minute)
	}
	e.clk.Add(time.Millisecond)
	if _, err := e.st.WarnWaiting(e.ctx); err != nil {
		t.Fatal(err)
	}
	if warnings("w") != 2 {
		t.Errorf("w: %d warnings after its second wait, want 2", warnings("w"))
	}
	evs, err := e.st.TaskEvents(e.ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == "task.waiting" && (ev.From == nil || ev.To == nil || *ev.From != "todo" || *ev.To != "todo") {
			t.Errorf("task.waiting event %+v: want from todo to todo", ev)
		}
	}
}

// TestSystemState: SetSystemState overwrites, SystemState reads back.
func TestSystemState(t *testing.T) {
	e := mntSetup(t)
	if _, ok, err := e.st.SystemState(e.ctx, "last_heartbeat"); err != nil || ok {
		t.Fatalf("new store: ok=%v err=%v; want nothing", ok, err)
	}
	for _, v := range []string{"1", "2"} {
		if err := e.st.SetSystemState(e.ctx, map[string]string{"k": v}); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := e.st.SystemState(e.ctx, "k"); err != nil || !ok || got != v {
			t.Errorf("k = %q %v %v, want %q", got, ok, err, v)
		}
	}
}

// TestCleanupSweepsOnlyTheEventsOfDeletedTasks: a deleted task's events
// go even where other tasks' events lie between its first and its last
// (those stay, byte for byte), and the windows to sweep are kept in the
// store between DeleteExpired and SweepEvents, as a cleanup killed in
// between leaves them for the next.
func TestCleanupSweepsOnlyTheEventsOfDeletedTasks(t *testing.T) {
	e := mntSetup(t)
	e.add(queue.Spec{ID: "old", Queue: "term"})
	e.add(queue.Spec{ID: "between", Queue: "other"})
	e.add(queue.Spec{ID: "between-kept", Queue: "other"})
	c := e.claimQ("term", "old", time.Hour)
	e.start(c)
	mid := e.claimQ("other", "between", time.Hour)
	if got := e.finish(c, queue.RunSucceeded); got != queue.TaskDone {
		t.Fatalf("old is %s, want done", got)
	}
	e.makeFailed("failed-old") // deleted too, in the other state's pass
	e.clk.Set(mntT0.Add(29 * mntDay))
	e.start(mid)
	e.finish(mid, queue.RunSucceeded) // done, but inside retention
	lo, hi := e.count(`SELECT MIN(seq) FROM events WHERE task_id = 'old'`), e.count(`SELECT MAX(seq) FROM events WHERE task_id = 'old'`)
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id != 'old' AND seq BETWEEN ? AND ?`, lo, hi); n == 0 {
		t.Fatal("setup: no other task's event lies inside old's window")
	}
	before := map[string]string{"between": e.dump("between"), "between-kept": e.dump("between-kept")}

	e.clk.Set(mntT0.Add(30*mntDay + time.Millisecond))
	for _, id := range []string{"old", "failed-old"} {
		st := map[string]string{"old": queue.TaskDone, "failed-old": queue.TaskFailed}[id]
		if n, _, err := e.st.DeleteExpired(e.ctx, st, queue.DefaultRetention(), 100); err != nil || n != 1 {
			t.Fatalf("DeleteExpired(%s) = %d, %v; want 1", st, n, err)
		}
		if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id = ?`, id); n == 0 {
			t.Fatal("the events went with the task: nothing left for the sweep to show")
		}
		if w := e.str(`SELECT value FROM system_state WHERE key = 'events_sweep'`); w == "NULL" || w == "[]" {
			t.Fatalf("no windows noted to sweep: %s", w)
		}
		e.sweep()
		if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id = ?`, id); n != 0 {
			t.Errorf("%d events of deleted task %s left after the sweep", n, id)
		}
		if n := e.count(`SELECT COUNT(*) FROM system_state WHERE key = 'events_sweep'`); n != 0 {
			t.Errorf("windows left after the sweep: %s", e.str(`SELECT value FROM system_state WHERE key = 'events_sweep'`))
		}
	}
	for id, b := range before {
		if a := e.dump(id); a != b {
			t.Errorf("task %s changed by cleanup:\nbefore:\n%s\nafter:\n%s", id, b, a)
		}
	}
	if n, more, err := e.st.SweepEvents(e.ctx); n != 0 || more || err != nil {
		t.Errorf("a sweep with nothing noted = %d, %v, %v; want 0, false, nil", n, more, err)
	}
}

// TestCleanupAfterMigration7: a store written before migration 7 (every
// event indexed by task in events_task) gets events_task_ends in its
// place when opened, and a cleanup then deletes its old tasks' events.
func TestCleanupAfterMigration7(t *testing.T) {
	d := storetest.OpenSQLite(t, "")
	path := d.Path
	e := &mntEnv{t: t, st: queue.New(d.Store()), clk: cqclock.NewFake(mntT0), ctx: context.Background()}
	e.st.Now = e.clk.Now
	e.st.Boot = cqclock.Following(e.clk.Now)
	e.makeDone("old")
	e.add(queue.Spec{ID: "live"})
	// Back to version 6's index, as a store written by the cq before.
	e.exec(`DROP INDEX events_task_ends`)
	e.exec(`CREATE INDEX events_task ON events (task_id)`)
	for _, col := range []string{"boot_id", "claimed_ns", "lease_until_ns"} { // migration 8's
		e.exec(`ALTER TABLE runs DROP COLUMN ` + col)
	}
	e.exec(`ALTER TABLE runs DROP COLUMN probe`)                 // migration 11's
	e.exec(`ALTER TABLE queues DROP COLUMN timeout_counts_asks`) // migration 11's
	e.exec(`PRAGMA user_version = 6`)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e.st = queue.New(d.Store())
	e.st.Now = e.clk.Now
	e.st.Boot = cqclock.Following(e.clk.Now)
	if got := e.ids(`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events'`); !slices.Equal(got, []string{"events_task_ends"}) {
		t.Fatalf("indexes of events after the migration: %v, want [events_task_ends]", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM events INDEXED BY events_task_ends WHERE task_id = 'old' AND (kind = 'task.created' OR kind = 'task.done' OR kind = 'task.failed' OR kind = 'task.cancelled')`); n != 2 {
		t.Fatalf("old's indexed events: %d, want its task.created and task.done", n)
	}
	liveEvents := e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'live'`)
	e.clk.Set(mntT0.Add(31 * mntDay))
	if got, _ := e.deleteAll(queue.DefaultRetention(), 100); got[queue.TaskDone] != 1 {
		t.Fatalf("deleted %v, want old", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'old'`); n != 0 {
		t.Errorf("%d events of old left after cleanup", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'live'`); n != liveEvents || n == 0 {
		t.Errorf("live's events: %d after cleanup, want %d", n, liveEvents)
	}
}
