package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cqclock "github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// bundle is what setup gives every test: a store over a fresh database in
// its own home folder, and the clock the store reads.
type bundle struct {
	ctx   context.Context
	st    *queue.Store
	home  string
	clock *cqclock.Fake
}

func setup(t *testing.T) *bundle {
	t.Helper()
	home := t.TempDir()
	d := storetest.OpenSQLite(t, home)
	clk := cqclock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	st := queue.New(d.Store())
	st.Now = clk.Now
	st.Boot = cqclock.Following(clk.Now)
	return &bundle{ctx: context.Background(), st: st, home: home, clock: clk}
}

// norm fills in a command when the spec has none and normalises it.
func norm(t *testing.T, sp queue.Spec) queue.Spec {
	t.Helper()
	if sp.Cmd == nil && sp.Shell == "" && sp.Intent == "" {
		sp.Cmd = []string{"true"}
	}
	if sp.Cwd == "" {
		sp.Cwd = "/"
	}
	n, err := sp.Normalize()
	if err != nil {
		t.Fatalf("Normalize(%+v): %v", sp, err)
	}
	return n
}

// create stores one spec and fails the test if it cannot.
func (b *bundle) create(t *testing.T, sp queue.Spec, enqueue bool) queue.Created {
	t.Helper()
	res, err := b.st.Create(b.ctx, []queue.Spec{norm(t, sp)}, queue.CreateOptions{Enqueue: enqueue})
	if err != nil {
		t.Fatalf("Create(%+v): %v", sp, err)
	}
	if len(res) != 1 {
		t.Fatalf("Create returned %d results, want 1", len(res))
	}
	return res[0]
}

// enq creates and enqueues a spec and returns its id.
func (b *bundle) enq(t *testing.T, sp queue.Spec) string {
	t.Helper()
	return b.create(t, sp, true).ID
}

// row is the stored tasks row of id as column → value, for the
// internal columns no public view shows (lane_head, seq, deps_left).
func (b *bundle) row(t *testing.T, id string) map[string]string {
	t.Helper()
	rows, err := sqlite.DBOf(b.st.Backend()).SQL.QueryContext(b.ctx, `SELECT * FROM tasks WHERE id = ?`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	all := scanAll(t, rows)
	if len(all) != 1 {
		t.Fatalf("task %s: %d rows", id, len(all))
	}
	return all[0]
}

func scanAll(t *testing.T, rows *sql.Rows) []map[string]string {
	t.Helper()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for i, c := range cols {
			switch v := vals[i].(type) {
			case nil:
				m[c] = "NULL"
			case []byte:
				m[c] = string(v)
			default:
				m[c] = fmt.Sprint(v)
			}
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dump renders every table a task operation may touch, so that "a refusal
// changes nothing" can be checked byte for byte.
func (b *bundle) dump(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range []string{
		`SELECT * FROM tasks ORDER BY id`,
		`SELECT * FROM runs ORDER BY id`,
		`SELECT * FROM task_deps ORDER BY task_id, dep_id`,
		`SELECT * FROM queues ORDER BY name`,
		`SELECT COUNT(*) AS n, COALESCE(MAX(seq), 0) AS last FROM events`,
	} {
		rows, err := sqlite.DBOf(b.st.Backend()).SQL.QueryContext(b.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		all := scanAll(t, rows)
		rows.Close()
		sb.WriteString(q + "\n")
		for _, m := range all {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&sb, "%s=%q ", k, m[k])
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func (b *bundle) eventCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRowContext(b.ctx, `SELECT COUNT(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) taskCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRowContext(b.ctx, `SELECT COUNT(*) FROM tasks`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) get(t *testing.T, id string) *queue.Task {
	t.Helper()
	task, err := b.st.Get(b.ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return task
}

func (b *bundle) events(t *testing.T, id string) []queue.Event {
	t.Helper()
	evs, err := b.st.TaskEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// claimOne claims the next runnable task and fails the test unless it is id.
func (b *bundle) claimOne(t *testing.T, id string) *queue.Claimed {
	t.Helper()
	c, err := b.st.Claim(b.ctx, queue.ClaimParams{Worker: "w", Host: "h", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || c.TaskID != id {
		t.Fatalf("claim = %+v, want task %s", c, id)
	}
	return c
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// wantCode checks that err is a *queue.Error of the given code.
func wantCode(t *testing.T, err error, code queue.Kind, what string) {
	t.Helper()
	var qe *queue.Error
	if !errors.As(err, &qe) {
		t.Fatalf("%s: got error %v (%T), want a *queue.Error with code %d", what, err, err, code)
	}
	if qe.Kind != code {
		t.Fatalf("%s: got code %d (%v), want %d", what, qe.Kind, err, code)
	}
}

func (b *bundle) wantState(t *testing.T, id, state, reason string) {
	t.Helper()
	task := b.get(t, id)
	if task.State != state {
		t.Fatalf("task %s is %s, want %s", id, task.State, state)
	}
	if state == queue.TaskBlocked && str(task.BlockedReason) != reason {
		t.Fatalf("task %s blocked_reason = %s, want %s", id, str(task.BlockedReason), reason)
	}
	if state != queue.TaskBlocked && task.BlockedReason != nil {
		t.Fatalf("task %s is %s but has blocked_reason %s", id, state, *task.BlockedReason)
	}
}

func TestBlockedReasonOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dep := b.enq(t, queue.Spec{})
	cases := []struct {
		name string
		spec queue.Spec
		// want is the blocked_reason after enqueue, then after each release.
		want string
		then string
	}{
		{"hold+dependency+schedule", queue.Spec{Hold: true, After: []string{dep}, Delay: "1h"}, queue.BlockedHold, queue.BlockedDependency},
		{"hold+schedule", queue.Spec{Hold: true, Delay: "1h"}, queue.BlockedHold, queue.BlockedScheduled},
		{"hold+dependency", queue.Spec{Hold: true, After: []string{dep}}, queue.BlockedHold, queue.BlockedDependency},
		{"dependency+schedule", queue.Spec{After: []string{dep}, Delay: "1h"}, queue.BlockedDependency, ""},
		{"schedule", queue.Spec{Delay: "1h"}, queue.BlockedScheduled, ""},
		{"at", queue.Spec{At: "2030-01-02T05:00:00Z"}, queue.BlockedScheduled, ""},
	}
	for _, c := range cases {
		id := b.enq(t, c.spec)
		b.wantState(t, id, queue.TaskBlocked, c.want)
		if c.then == "" {
			continue
		}
		if _, state, err := b.st.Release(b.ctx, id, ""); err != nil || state != queue.TaskBlocked {
			t.Fatalf("%s: Release = %s, %v; want blocked", c.name, state, err)
		}
		b.wantState(t, id, queue.TaskBlocked, c.then)
	}

	t.Run("hold on top of a schedule names hold until released", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.enq(t, queue.Spec{Delay: "1h"})
		if _, _, err := b.st.Hold(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, id, queue.TaskBlocked, queue.BlockedHold)
		if _, _, err := b.st.Release(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, id, queue.TaskBlocked, queue.BlockedScheduled)
	})

	t.Run("a retry backoff is named retry, not scheduled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A retry backoff is written by the worker, which does not exist
		// yet: mark a held, scheduled task's time as a retry backoff
		// directly, then release it.
		id := b.enq(t, queue.Spec{Hold: true, Delay: "1h"})
		if _, err := sqlite.DBOf(b.st.Backend()).SQL.ExecContext(b.ctx, `UPDATE tasks SET not_before_why = 'retry' WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.st.Release(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, id, queue.TaskBlocked, queue.BlockedRetry)
		// Due: a retry backoff is lifted by PromoteDue like a schedule.
		b.clock.Add(time.Hour)
		if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 1 {
			t.Fatalf("PromoteDue = %d, %v; want 1", n, err)
		}
		b.wantState(t, id, queue.TaskTodo, "")
	})

	t.Run("release after the time has passed goes straight to todo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.enq(t, queue.Spec{Hold: true, Delay: "1h"})
		b.clock.Add(2 * time.Hour)
		_, state, err := b.st.Release(b.ctx, id, "")
		if err != nil || state != queue.TaskTodo {
			t.Fatalf("Release = %s, %v; want todo", state, err)
		}
		b.wantState(t, id, queue.TaskTodo, "")
	})
}

func TestPromoteDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sched := b.enq(t, queue.Spec{Delay: "1h"})
	at := b.enq(t, queue.Spec{At: "2030-01-02T04:34:05Z"}) // 90 minutes after the clock's start
	held := b.enq(t, queue.Spec{Delay: "1h", Hold: true})
	dep := b.enq(t, queue.Spec{})
	waiting := b.enq(t, queue.Spec{Delay: "1h", After: []string{dep}})
	inbox := b.create(t, queue.Spec{Delay: "1h"}, false).ID

	promote := func(want int) {
		t.Helper()
		before := b.eventCount(t)
		n, err := b.st.PromoteDue(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("PromoteDue moved %d tasks, want %d", n, want)
		}
		if got := b.eventCount(t) - before; got != want {
			t.Fatalf("PromoteDue appended %d events, want %d", got, want)
		}
	}

	promote(0)
	b.clock.Add(time.Hour - time.Millisecond)
	promote(0)
	b.wantState(t, sched, queue.TaskBlocked, queue.BlockedScheduled)

	// not_before is inclusive: at exactly the time the task is due.
	b.clock.Add(time.Millisecond)
	promote(1)
	b.wantState(t, sched, queue.TaskTodo, "")
	evs := b.events(t, sched)
	last := evs[len(evs)-1]
	if str(last.From) != queue.TaskBlocked || str(last.To) != queue.TaskTodo {
		t.Fatalf("promotion event %s → %s, want blocked → todo", str(last.From), str(last.To))
	}
	b.wantState(t, at, queue.TaskBlocked, queue.BlockedScheduled)

	b.clock.Add(30 * time.Minute)
	promote(1)
	b.wantState(t, at, queue.TaskTodo, "")
	// A hold or a dependency still blocks a task whose time has come, and
	// an inbox task is not in any lane yet.
	b.wantState(t, held, queue.TaskBlocked, queue.BlockedHold)
	b.wantState(t, waiting, queue.TaskBlocked, queue.BlockedDependency)
	b.wantState(t, inbox, queue.TaskInbox, "")
	promote(0)

	if _, state, err := b.st.Release(b.ctx, held, ""); err != nil || state != queue.TaskTodo {
		t.Fatalf("Release of a due held task = %s, %v; want todo", state, err)
	}
	// An inbox task whose time has passed goes to todo at the gateway.
	if _, state, err := b.st.Enqueue(b.ctx, inbox); err != nil || state != queue.TaskTodo {
		t.Fatalf("Enqueue of a due inbox task = %s, %v; want todo", state, err)
	}
}

func TestLaneHeads(t *testing.T) {
	t.Parallel()

	head := func(b *bundle, t *testing.T, id string) bool {
		t.Helper()
		return b.row(t, id)["lane_head"] == "1"
	}
	seq := func(b *bundle, t *testing.T, id string) string { t.Helper(); return b.row(t, id)["seq"] }
	wantHeads := func(b *bundle, t *testing.T, ids []string, want []bool) {
		t.Helper()
		for i, id := range ids {
			if got := head(b, t, id); got != want[i] {
				t.Fatalf("task %d (%s): lane_head = %v, want %v", i, id, got, want[i])
			}
		}
	}

	t.Run("first of a key is head, the next takes over on cancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k"})
		t2 := b.enq(t, queue.Spec{Key: "k"})
		t3 := b.enq(t, queue.Spec{Key: "k", Queue: "other"}) // lanes are shared across queues
		free := b.enq(t, queue.Spec{})
		wantHeads(b, t, []string{t1, t2, t3, free}, []bool{true, false, false, true})

		if _, _, err := b.st.Cancel(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		wantHeads(b, t, []string{t1, t2, t3}, []bool{false, true, false})
		// Cancelling a task that is not the head hands nothing on.
		if _, _, err := b.st.Cancel(b.ctx, t3, ""); err != nil {
			t.Fatal(err)
		}
		wantHeads(b, t, []string{t2, t3}, []bool{true, false})
	})

	t.Run("a retried task joins the back of its lane", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k"})
		t2 := b.enq(t, queue.Spec{Key: "k"})
		if _, _, err := b.st.Cancel(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		_, state, err := b.st.Retry(b.ctx, t1, "")
		if err != nil || state != queue.TaskTodo {
			t.Fatalf("Retry = %s, %v; want todo", state, err)
		}
		t3 := b.enq(t, queue.Spec{Key: "k"})
		wantHeads(b, t, []string{t2, t1, t3}, []bool{true, false, false})
		if inOrder := seqLess(t, seq(b, t, t2), seq(b, t, t1)) && seqLess(t, seq(b, t, t1), seq(b, t, t3)); !inOrder {
			t.Fatalf("lane order by seq: %s=%s %s=%s %s=%s, want t2 < t1 < t3", t2, seq(b, t, t2), t1, seq(b, t, t1), t3, seq(b, t, t3))
		}
		if _, _, err := b.st.Cancel(b.ctx, t2, ""); err != nil {
			t.Fatal(err)
		}
		wantHeads(b, t, []string{t1, t3}, []bool{true, false})
	})

	t.Run("inbox tasks are not in the lane; the gateway order is", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		early := b.create(t, queue.Spec{Key: "k"}, false).ID
		t1 := b.enq(t, queue.Spec{Key: "k"})
		if head(b, t, early) || !head(b, t, t1) {
			t.Fatalf("inbox task must not hold the lane: lane_head early=%v t1=%v", head(b, t, early), head(b, t, t1))
		}
		if _, _, err := b.st.Enqueue(b.ctx, early); err != nil {
			t.Fatal(err)
		}
		wantHeads(b, t, []string{t1, early}, []bool{true, false})
	})

	t.Run("a blocked head holds back the tasks behind it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k", Hold: true})
		t2 := b.enq(t, queue.Spec{Key: "k"})
		wantHeads(b, t, []string{t1, t2}, []bool{true, false})
		if _, _, err := b.st.Release(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.st.Hold(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		wantHeads(b, t, []string{t1, t2}, []bool{true, false})
	})

	t.Run("a key whose tasks all ended is free again", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k"})
		if _, _, err := b.st.Cancel(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		t2 := b.enq(t, queue.Spec{Key: "k"})
		wantHeads(b, t, []string{t2}, []bool{true})
	})

	t.Run("cancelling a head cascades to a dependent behind it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k"})
		t2 := b.enq(t, queue.Spec{Key: "k", After: []string{t1}})
		t3 := b.enq(t, queue.Spec{Key: "k"})
		if _, _, err := b.st.Cancel(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, t2, queue.TaskCancelled, "")
		wantHeads(b, t, []string{t1, t2, t3}, []bool{false, false, true})
	})
}

func seqLess(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y int64
	if _, err := fmt.Sscan(a, &x); err != nil {
		t.Fatalf("seq %q: %v", a, err)
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		t.Fatalf("seq %q: %v", b, err)
	}
	return x < y
}

func TestDependencies(t *testing.T) {
	t.Parallel()

	t.Run("cancel cascades transitively, naming the dependency", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{})
		bb := b.enq(t, queue.Spec{After: []string{a}})
		c := b.enq(t, queue.Spec{After: []string{bb}})
		d := b.create(t, queue.Spec{After: []string{c}}, false).ID // still in inbox
		other := b.enq(t, queue.Spec{})
		b.wantState(t, bb, queue.TaskBlocked, queue.BlockedDependency)

		if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct{ id, dep string }{{bb, a}, {c, bb}, {d, c}} {
			task := b.get(t, x.id)
			if task.State != queue.TaskCancelled {
				t.Fatalf("dependent %s is %s, want cancelled", x.id, task.State)
			}
			if !strings.Contains(str(task.Reason), x.dep) {
				t.Fatalf("dependent %s: reason %q does not name its dependency %s", x.id, str(task.Reason), x.dep)
			}
			evs := b.events(t, x.id)
			last := evs[len(evs)-1]
			if str(last.To) != queue.TaskCancelled || !strings.Contains(str(last.Reason), x.dep) {
				t.Fatalf("dependent %s: last event %s %s→%s reason %q; want → cancelled naming %s",
					x.id, last.Kind, str(last.From), str(last.To), str(last.Reason), x.dep)
			}
		}
		b.wantState(t, other, queue.TaskTodo, "")
	})

	t.Run("a diamond is cancelled once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{})
		l := b.enq(t, queue.Spec{After: []string{a}})
		r := b.enq(t, queue.Spec{After: []string{a}})
		d := b.enq(t, queue.Spec{After: []string{l, r}})
		if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		if n := cancelEvents(t, b, d); n != 1 {
			t.Fatalf("task %s got %d cancel events, want 1", d, n)
		}
	})

	// e waits on a and on b, itself a dependent of a: the cancel of a
	// reaches e twice, directly and through b. Before the fix the second
	// visit refused (e was no longer blocked) and the whole cancel, or the
	// failed run's end that caused it, was refused with it.
	t.Run("a task waiting on a dependency and on its dependent is cancelled once", func(t *testing.T) {
		t.Parallel()
		for _, how := range []string{"cancel", "failed run"} {
			b := setup(t)
			a := b.enq(t, queue.Spec{})
			bb := b.enq(t, queue.Spec{After: []string{a}})
			e := b.enq(t, queue.Spec{After: []string{bb, a}})
			switch how {
			case "cancel":
				if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
					t.Fatalf("%s: %v", how, err)
				}
			case "failed run":
				c, err := b.st.Claim(b.ctx, queue.ClaimParams{Worker: "w", Lease: time.Minute})
				if err != nil || c == nil || c.TaskID != a {
					t.Fatalf("claim: %+v %v", c, err)
				}
				code := 1
				if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunFailed, ExitCode: &code}); err != nil {
					t.Fatalf("%s: %v", how, err)
				}
			}
			for _, id := range []string{bb, e} {
				b.wantState(t, id, queue.TaskCancelled, "")
			}
			if n := cancelEvents(t, b, e); n != 1 {
				t.Errorf("%s: task e got %d cancel events, want 1", how, n)
			}
		}
	})

	t.Run("retry of a dependent of a cancelled task is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{})
		dep := b.enq(t, queue.Spec{After: []string{a}})
		if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		before := b.dump(t)
		_, _, err := b.st.Retry(b.ctx, dep, "")
		wantCode(t, err, queue.Conflict, "Retry of a dependent of a cancelled task")
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("refusal %q does not name the dependency %s", err, a)
		}
		if after := b.dump(t); after != before {
			t.Fatalf("a refused retry changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		// Retrying the dependency does not revive the dependent...
		if _, _, err := b.st.Retry(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, dep, queue.TaskCancelled, "")
		// ...but once it is live again, the dependent may be retried and
		// waits for it.
		if _, state, err := b.st.Retry(b.ctx, dep, ""); err != nil || state != queue.TaskBlocked {
			t.Fatalf("Retry of the dependent after its dependency came back = %s, %v; want blocked", state, err)
		}
		b.wantState(t, dep, queue.TaskBlocked, queue.BlockedDependency)
	})

	t.Run("a dependency deleted by cleanup still refuses the retry if it did not end done", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{Hold: true})
		if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		// A done dependency, deleted too, leaves nothing to wait for.
		done := b.enq(t, queue.Spec{Queue: "dq"})
		waiter := b.enq(t, queue.Spec{After: []string{done}})
		c, err := b.st.Claim(b.ctx, queue.ClaimParams{Worker: "w1", Host: "h", Queues: []string{"dq"}, Lease: time.Minute})
		if err != nil || c == nil || c.TaskID != done {
			t.Fatalf("Claim = %v, %v; want %s", c, err, done)
		}
		if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 100, 100); err != nil {
			t.Fatal(err)
		}
		code := 0
		if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		b.wantState(t, done, queue.TaskDone, "")

		// An hour later the dependents end; only the dependencies are past
		// a 30-minute retention.
		b.clock.Add(time.Hour)
		dep := b.enq(t, queue.Spec{After: []string{a}})             // cancelled at once
		inbox := b.create(t, queue.Spec{After: []string{a}}, false) // likewise
		b.wantState(t, dep, queue.TaskCancelled, "")
		b.wantState(t, inbox.ID, queue.TaskCancelled, "")
		if _, _, err := b.st.Cancel(b.ctx, waiter, ""); err != nil {
			t.Fatal(err)
		}
		r := queue.Retention{Done: 30 * time.Minute, Cancelled: 30 * time.Minute, Failed: 30 * time.Minute}
		for _, st := range []string{queue.TaskCancelled, queue.TaskDone} {
			if n, _, err := b.st.DeleteExpired(b.ctx, st, r, 100); err != nil || n != 1 {
				t.Fatalf("DeleteExpired(%s) = %d, %v; want the one dependency", st, n, err)
			}
		}

		_, _, err = b.st.Retry(b.ctx, dep, "")
		wantCode(t, err, queue.Conflict, "Retry of a dependent of a cancelled task cleanup deleted")
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("refusal %q does not name the dependency %s", err, a)
		}
		if _, _, err := b.st.SetState(b.ctx, inbox.ID, queue.TaskTodo, ""); queue.KindOf(err) != queue.Conflict {
			t.Fatalf("set-state todo of another such dependent: %v; want a conflict", err)
		}
		b.wantState(t, dep, queue.TaskCancelled, "")
		b.wantState(t, inbox.ID, queue.TaskCancelled, "")
		if _, state, err := b.st.Retry(b.ctx, waiter, ""); err != nil || state != queue.TaskTodo {
			t.Fatalf("Retry of a dependent whose done dependency was deleted = %s, %v; want todo", state, err)
		}
	})

	t.Run("enqueue after a cancelled task is cancelled at once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{})
		if _, _, err := b.st.Cancel(b.ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		c := b.create(t, queue.Spec{After: []string{a}}, true)
		if c.State != queue.TaskCancelled {
			t.Fatalf("Create after a cancelled task: state %s, want cancelled", c.State)
		}
		if task := b.get(t, c.ID); !strings.Contains(str(task.Reason), a) {
			t.Fatalf("reason %q does not name the dependency %s", str(task.Reason), a)
		}
	})

	t.Run("after naming no task is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := b.dump(t)
		_, err := b.st.Create(b.ctx, []queue.Spec{norm(t, queue.Spec{After: []string{"nosuchtask"}})}, queue.CreateOptions{Enqueue: true})
		wantCode(t, err, queue.NotFound, "Create --after nosuchtask")
		if after := b.dump(t); after != before {
			t.Fatalf("a refused create changed the store")
		}
	})

	t.Run("dependencies are listed in the task view", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.enq(t, queue.Spec{})
		c := b.enq(t, queue.Spec{})
		d := b.enq(t, queue.Spec{After: []string{c, a, c}})
		got := b.get(t, d).After
		sort.Strings(got)
		want := []string{a, c}
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("after = %v, want %v (deduplicated)", got, want)
		}
	})
}

func TestUniqueKeys(t *testing.T) {
	t.Parallel()

	t.Run("second unique task of a live key conflicts, naming the holder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		holder := b.create(t, queue.Spec{Key: "k"}, false).ID // inbox is not terminal
		before := b.dump(t)
		_, err := b.st.Create(b.ctx, []queue.Spec{norm(t, queue.Spec{Key: "k", Unique: true})}, queue.CreateOptions{Enqueue: true})
		wantCode(t, err, queue.Conflict, "unique create while the key is live")
		var qe *queue.Error
		if !errors.As(err, &qe) || qe.Existing != holder {
			t.Fatalf("conflict Existing = %q, want %s", qe.Existing, holder)
		}
		if after := b.dump(t); after != before {
			t.Fatalf("a refused create changed the store")
		}
		if _, _, err := b.st.Cancel(b.ctx, holder, ""); err != nil {
			t.Fatal(err)
		}
		b.enq(t, queue.Spec{Key: "k", Unique: true})
	})

	// A holder that a worker has claimed, or that waits blocked (a hold,
	// a retry backoff), still holds the key: only a terminal one frees it.
	for _, tc := range []struct {
		name, state, reason string
		// into moves the holder, created enqueued, into its state.
		into func(t *testing.T, b *bundle, id string)
	}{
		{"holder doing", queue.TaskDoing, "", func(t *testing.T, b *bundle, id string) {
			b.claimOne(t, id)
		}},
		{"holder blocked by a hold", queue.TaskBlocked, queue.BlockedHold, func(t *testing.T, b *bundle, id string) {
			if _, _, err := b.st.Hold(b.ctx, id, ""); err != nil {
				t.Fatal(err)
			}
		}},
		{"holder blocked by a retry backoff", queue.TaskBlocked, queue.BlockedRetry, func(t *testing.T, b *bundle, id string) {
			c := b.claimOne(t, id)
			if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run("unique create is refused while the "+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			one := 1
			holder := b.enq(t, queue.Spec{Key: "k", Unique: true, Retries: &one})
			tc.into(t, b, holder)
			b.wantState(t, holder, tc.state, tc.reason)
			before := b.dump(t)
			_, err := b.st.Create(b.ctx, []queue.Spec{norm(t, queue.Spec{Key: "k", Unique: true})}, queue.CreateOptions{Enqueue: true})
			wantCode(t, err, queue.Conflict, "unique create while the key's holder is "+tc.state)
			var qe *queue.Error
			if errors.As(err, &qe); qe.Existing != holder || qe.ExistingState != tc.state {
				t.Fatalf("conflict names %q (%s), want the holder %s (%s)", qe.Existing, qe.ExistingState, holder, tc.state)
			}
			if after := b.dump(t); after != before {
				t.Fatalf("a refused create changed the store")
			}
		})
	}

	t.Run("two in one batch: the second line conflicts and nothing is stored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := norm(t, queue.Spec{ID: "first", Key: "k", Unique: true})
		second := norm(t, queue.Spec{ID: "second", Key: "k", Unique: true})
		before := b.dump(t)
		_, err := b.st.Create(b.ctx, []queue.Spec{first, second}, queue.CreateOptions{Enqueue: true})
		var le *queue.LineError
		if !errors.As(err, &le) || le.Line != 2 {
			t.Fatalf("Create = %v, want a LineError on line 2", err)
		}
		wantCode(t, err, queue.Conflict, "second unique line")
		// The holder goes with the batch: it is no existing task to name.
		var qe *queue.Error
		if errors.As(err, &qe); qe.Existing != "" || !strings.Contains(qe.Msg, "first") {
			t.Fatalf("conflict Existing = %q, message %q; want none, and a message naming first", qe.Existing, qe.Msg)
		}
		if after := b.dump(t); after != before {
			t.Fatalf("a failed batch changed the store")
		}
	})

	t.Run("retry of a unique task is refused while another holds the key", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		t1 := b.enq(t, queue.Spec{Key: "k", Unique: true})
		if _, _, err := b.st.Cancel(b.ctx, t1, ""); err != nil {
			t.Fatal(err)
		}
		t2 := b.enq(t, queue.Spec{Key: "k", Unique: true})
		_, _, err := b.st.Retry(b.ctx, t1, "")
		wantCode(t, err, queue.Conflict, "retry while the key is held")
		var qe *queue.Error
		if errors.As(err, &qe); qe.Existing != t2 {
			t.Fatalf("conflict Existing = %q, want %s", qe.Existing, t2)
		}
	})

	t.Run("racing stores: exactly one gets the key", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 8
		stores := make([]*queue.Store, n)
		for i := range stores {
			d, err := sqlite.Open(b.ctx, b.st.Backend().Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			stores[i] = queue.New(d.Store())
		}
		start := make(chan struct{})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = st.Create(b.ctx, []queue.Spec{norm(t, queue.Spec{Key: "k", Unique: true})}, queue.CreateOptions{Enqueue: true})
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case queue.IsConflict(err):
			default:
				t.Fatalf("racing unique create: unexpected error %v", err)
			}
		}
		if won != 1 || b.taskCount(t) != 1 {
			t.Fatalf("%d creates won and %d tasks exist, want exactly 1", won, b.taskCount(t))
		}
	})
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sp := queue.Spec{ID: "job-1", After: nil, Env: map[string]string{"A": "1"}}
	first := b.create(t, sp, true)
	if !first.New || first.ID != "job-1" || first.State != queue.TaskTodo {
		t.Fatalf("first create = %+v, want new job-1 in todo", first)
	}
	before := b.dump(t)

	// The same spec, before defaults are filled in differently: a no-op.
	again := b.create(t, queue.Spec{ID: "job-1", Queue: "default", Priority: "p2", Env: map[string]string{"A": "1"}}, true)
	if again.New || again.ID != "job-1" || again.State != queue.TaskTodo {
		t.Fatalf("re-create = %+v, want the existing job-1, not new", again)
	}
	if after := b.dump(t); after != before {
		t.Fatalf("an idempotent re-create changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The no-op holds whatever the task's state is now.
	if _, _, err := b.st.Cancel(b.ctx, "job-1", ""); err != nil {
		t.Fatal(err)
	}
	if again := b.create(t, sp, true); again.New || again.State != queue.TaskCancelled {
		t.Fatalf("re-create of a cancelled task = %+v, want the existing one, cancelled", again)
	}

	for name, other := range map[string]queue.Spec{
		"another command":  {ID: "job-1", Cmd: []string{"false"}, Env: map[string]string{"A": "1"}},
		"another env":      {ID: "job-1", Env: map[string]string{"A": "2"}},
		"another cwd":      {ID: "job-1", Env: map[string]string{"A": "1"}, Cwd: "/tmp"},
		"another priority": {ID: "job-1", Env: map[string]string{"A": "1"}, Priority: "P0"},
	} {
		before := b.dump(t)
		_, err := b.st.Create(b.ctx, []queue.Spec{norm(t, other)}, queue.CreateOptions{Enqueue: true})
		wantCode(t, err, queue.Conflict, "re-create with "+name)
		if after := b.dump(t); after != before {
			t.Fatalf("a refused re-create with %s changed the store", name)
		}
	}

	t.Run("after order does not matter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		x, y := b.enq(t, queue.Spec{ID: "x"}), b.enq(t, queue.Spec{ID: "y"})
		b.create(t, queue.Spec{ID: "z", After: []string{x, y}}, true)
		if again := b.create(t, queue.Spec{ID: "z", After: []string{y, x}}, true); again.New {
			t.Fatalf("re-create with --after in another order created a new task")
		}
	})
}

func TestResolve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"abc", "abcd", "abce", "x1yz", "q.1", "q-1"} {
		b.enq(t, queue.Spec{ID: id})
	}
	for _, c := range []struct {
		ref, want string
		code      queue.Kind
	}{
		{"abc", "abc", 0},   // exact beats the prefix of abcd and abce
		{"abcd", "abcd", 0}, // exact
		{"x1", "x1yz", 0},   // unique prefix
		{"x", "x1yz", 0},
		{"q.", "q.1", 0},
		{"ab", "", queue.Invalid}, // ambiguous
		{"q", "", queue.Invalid},
		{"abcf", "", queue.NotFound},
		{"zz", "", queue.NotFound},
		{"x1yzz", "", queue.NotFound},
		{"a%", "", queue.NotFound}, // no LIKE pattern leaks through
		{"", "", queue.Invalid},
	} {
		got, err := b.st.Resolve(b.ctx, c.ref)
		if c.code == 0 {
			if err != nil || got != c.want {
				t.Errorf("Resolve(%q) = %q, %v; want %q", c.ref, got, err, c.want)
			}
			continue
		}
		var qe *queue.Error
		if !errors.As(err, &qe) || qe.Kind != c.code {
			t.Errorf("Resolve(%q) = %q, %v; want a %v error", c.ref, got, err, c.code)
		}
	}
	if _, err := b.st.Resolve(b.ctx, "ab"); err == nil || !strings.Contains(err.Error(), "abcd") {
		t.Errorf("an ambiguous prefix should list candidates, got %v", err)
	}

	// Commands resolve prefixes the same way; an ambiguous one changes nothing.
	before := b.dump(t)
	_, _, err := b.st.Cancel(b.ctx, "ab", "")
	wantCode(t, err, queue.Invalid, "Cancel(ambiguous prefix)")
	if after := b.dump(t); after != before {
		t.Fatalf("a cancel by an ambiguous prefix changed the store")
	}
	id, state, err := b.st.Cancel(b.ctx, "x1", "")
	if err != nil || id != "x1yz" || state != queue.TaskCancelled {
		t.Fatalf("Cancel(x1) = %s, %s, %v; want x1yz cancelled", id, state, err)
	}
}

func TestBatchAllOrNothing(t *testing.T) {
	t.Parallel()

	t.Run("a later line may depend on an earlier one", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.st.Create(b.ctx, []queue.Spec{
			norm(t, queue.Spec{ID: "one"}),
			norm(t, queue.Spec{ID: "two", After: []string{"one"}}),
		}, queue.CreateOptions{Enqueue: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 2 || res[0].State != queue.TaskTodo || res[1].State != queue.TaskBlocked {
			t.Fatalf("batch = %+v, want one todo and two blocked", res)
		}
	})

	for _, c := range []struct {
		name  string
		bad   queue.Spec
		setup func(b *bundle, t *testing.T)
		code  queue.Kind
	}{
		{name: "after naming no task", bad: queue.Spec{After: []string{"missing"}}, code: queue.NotFound},
		{name: "after naming a later line", bad: queue.Spec{After: []string{"l4"}}, code: queue.NotFound},
		{name: "id re-used with another spec", bad: queue.Spec{ID: "taken", Cmd: []string{"other"}}, code: queue.Conflict,
			setup: func(b *bundle, t *testing.T) { b.enq(t, queue.Spec{ID: "taken"}) }},
		{name: "id re-used within the batch", bad: queue.Spec{ID: "l1", Cmd: []string{"other"}}, code: queue.Conflict},
		{name: "unique key held", bad: queue.Spec{Key: "k", Unique: true}, code: queue.Conflict,
			setup: func(b *bundle, t *testing.T) { b.enq(t, queue.Spec{Key: "k"}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if c.setup != nil {
				c.setup(b, t)
			}
			before := b.dump(t)
			specs := []queue.Spec{
				norm(t, queue.Spec{ID: "l1", Queue: "fresh"}),
				norm(t, queue.Spec{ID: "l2", After: []string{"l1"}}),
				norm(t, c.bad),
				norm(t, queue.Spec{ID: "l4"}),
			}
			res, err := b.st.Create(b.ctx, specs, queue.CreateOptions{Enqueue: true})
			var le *queue.LineError
			if !errors.As(err, &le) {
				t.Fatalf("Create = %v, %v; want a *LineError", res, err)
			}
			if le.Line != 3 {
				t.Fatalf("LineError.Line = %d, want 3 (%v)", le.Line, err)
			}
			if !strings.HasPrefix(err.Error(), "line 3: ") {
				t.Fatalf("error %q should start with \"line 3: \"", err)
			}
			wantCode(t, err, c.code, c.name)
			if after := b.dump(t); after != before {
				t.Fatalf("a failed batch changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestListByStateMatchesTheFullListing: a page of tasks in given states
// (read per state and queue, see taskPageByState in internal/store/sqlite)
// is exactly the head of the full listing with the same filter, newest
// first.
func TestListByStateMatchesTheFullListing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 60 {
		sp := queue.Spec{Queue: fmt.Sprintf("q%d", i%3)}
		if i%4 == 1 {
			sp.Hold = true
		}
		id := b.enq(t, sp)
		if i%5 == 2 {
			if _, _, err := b.st.Cancel(b.ctx, id, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := func(ts []*queue.Task) []string {
		out := make([]string, len(ts))
		for i, tk := range ts {
			out[i] = tk.ID
		}
		return out
	}
	for _, f := range []queue.ListFilter{
		{States: []string{queue.TaskTodo}, Limit: 5},
		{States: []string{queue.TaskCancelled, queue.TaskBlocked}, Limit: 7},
		{States: []string{queue.TaskTodo}, Queue: "q1", Limit: 3},
		{States: []string{queue.TaskTodo, queue.TaskTodo}, Limit: 4},
		{States: []string{queue.TaskDone}, Limit: 4},
		{States: []string{queue.TaskBlocked}, Limit: 500},
	} {
		page, err := b.st.List(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		all := f
		all.Limit = 0
		full, err := b.st.List(b.ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		want := ids(full)[:min(len(full), f.Limit)]
		if got := ids(page); !slices.Equal(got, want) {
			t.Errorf("%+v: got %v, want %v", f, got, want)
		}
	}
}

// TestListEachAcrossChunks: a listing of everything comes newest first,
// each task with its own dependencies, across the chunks ListEach holds
// one at a time.
func TestListEachAcrossChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1234
	created := make([]string, 0, n)
	after := map[string][]string{}
	for i := range n {
		sp := queue.Spec{}
		if i%7 == 3 {
			sp.After = []string{created[i-1], created[i-3]}
		}
		id := b.enq(t, sp)
		created = append(created, id)
		if sp.After != nil {
			after[id] = sp.After
		}
	}
	i := n
	err := b.st.ListEach(b.ctx, queue.ListFilter{}, func(tk *queue.Task) error {
		i--
		if i < 0 || tk.ID != created[i] {
			return fmt.Errorf("task %d of the listing is %s, want %s", n-1-i, tk.ID, created[max(i, 0)])
		}
		if !slices.Equal(tk.After, after[tk.ID]) {
			return fmt.Errorf("task %s: after %v, want %v", tk.ID, tk.After, after[tk.ID])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != 0 {
		t.Errorf("listed %d tasks, want %d", n-i, n)
	}
}

// cancelEvents counts the events that moved task id to cancelled.
func cancelEvents(t *testing.T, b *bundle, id string) int {
	t.Helper()
	n := 0
	for _, e := range b.events(t, id) {
		if str(e.To) == queue.TaskCancelled {
			n++
		}
	}
	return n
}
