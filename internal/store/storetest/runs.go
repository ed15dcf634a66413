// The tests of the runs area (claims, starts, leases, ends, completion,
// and the reads of runs).

package storetest

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// claim claims tasks ids of queue q for worker w (host h) at now, each
// run named "run-" + its task, token "tok-" + its task, attempt 1.
func claim(tx store.Tx, q, w, h, now string, lease store.Lease, ids ...string) error {
	c := store.Claim{At: now, Worker: w, Host: h, Lease: lease, ClaimedNS: 1}
	for _, id := range ids {
		c.Runs = append(c.Runs, store.ClaimRun{TaskID: id, RunID: "run-" + id, Token: "tok-" + id, Queue: q, Attempt: 1})
	}
	return tx.ClaimTasks(ctx, c)
}

// wallLease is a lease on the wall clock only, until until.
func wallLease(until string) store.Lease { return store.Lease{Expires: until} }

func (e *env) run(id string) store.Run {
	e.t.Helper()
	r, err := e.s.RunGet(ctx, id)
	if err != nil {
		e.t.Fatalf("RunGet(%s): %v", id, err)
	}
	return *r
}

func (e *env) runView(id string) store.RunView {
	e.t.Helper()
	v, err := e.s.RunViewGet(ctx, id)
	if err != nil {
		e.t.Fatalf("RunViewGet(%s): %v", id, err)
	}
	return *v
}

// testClaimOrder: a claim reads the runnable tasks of a queue (todo, the
// heads of their lanes) by priority then seq, up to its limit, and the
// queues it may take from (not paused, with their live runs counted when
// they have a limit).
func testClaimOrder(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, tk := range []store.Task{
			{ID: "p2a", Priority: 2}, {ID: "p0a"}, {ID: "p1a", Priority: 1}, {ID: "k1", Key: "k"}, {ID: "k2", Key: "k"},
			{ID: "p0b"}, {ID: "blocked", State: "blocked", Hold: true}, {ID: "elsewhere", Queue: "other"},
			{ID: "lim1", Queue: "lim"}, {ID: "lim2", Queue: "lim"}, {ID: "paused1", Queue: "paused"},
		} {
			if err := enqueue(tx, tk, at(0)); err != nil {
				return err
			}
		}
		for _, u := range []store.QueueUpdate{
			{Name: "lim", At: at(0), Set: store.SetQueueConcurrency, Concurrency: 2},
			{Name: "paused", At: at(0), Set: store.SetQueuePaused, Paused: true},
		} {
			if _, err := tx.QueueUpdate(ctx, u); err != nil {
				return err
			}
		}
		return claim(tx, "lim", "w", "h", at(1), wallLease(at(60)), "lim1")
	})
	heads := func(q string, limit int, want ...string) {
		t.Helper()
		prior := []store.ClaimHead{{ID: "prior"}}
		got, err := e.s.ClaimHeads(ctx, q, limit, prior)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for i, h := range got {
			gotIDs = append(gotIDs, h.ID)
			if i == 0 {
				continue
			}
			tk := e.task(h.ID)
			if h != (store.ClaimHead{Queue: q, ID: tk.ID, Priority: tk.Priority, Seq: tk.Seq, Attempts: tk.Attempts, Spec: tk.Spec}) {
				t.Errorf("ClaimHeads gave %+v of %+v", h, tk)
			}
		}
		if want = append([]string{"prior"}, want...); !slices.Equal(gotIDs, want) {
			t.Errorf("ClaimHeads(%s, %d) = %v, want %v", q, limit, gotIDs, want)
		}
	}
	heads("q", 10, "p0a", "k1", "p0b", "p1a", "p2a")
	heads("q", 2, "p0a", "k1")
	heads("q", 0)
	heads("lim", 5, "lim2")
	heads("none", 5)
	queues := func(names []string, want ...string) {
		t.Helper()
		qs, err := e.s.ClaimQueues(ctx, names)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, q := range qs {
			got = append(got, fmt.Sprintf("%s %d/%d", q.Name, q.Live, q.Concurrency))
			if q.Name == "q" && q.Queue != defaultQueue("q") {
				t.Errorf("ClaimQueues gave %+v", q.Queue)
			}
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("ClaimQueues(%v) = %v, want %v", names, got, want)
		}
	}
	queues(nil, "lim 1/2", "other 0/0", "q 0/0")
	queues([]string{"q", "paused", "lim", "nope"}, "lim 1/2", "q 0/0")
}

// testClaimStartLease: a claim moves its tasks to doing and stores their
// runs; a start, a renewal and a run's update apply only under the run's
// lease token (and, for a renewal, a valid lease; for the reaper's update,
// an expired one), by the lease rules on both clocks.
func testClaimStartLease(t *testing.T, b Backend) {
	e := newEnv(t, b)
	lease := store.Lease{Expires: at(60), BootID: "b1", UntilNS: 60_000}
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"a", "b", "c"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		return claim(tx, "q", "w1", "h1", at(1), lease, "a", "b")
	})
	for _, id := range []string{"a", "b"} {
		tk := e.task(id)
		if tk.State != "doing" || tk.Attempts != 1 || tk.TodoAt != "" || tk.UpdatedAt != at(1) {
			t.Errorf("claimed task %+v", tk)
		}
	}
	wantRun := store.Run{ID: "run-a", TaskID: "a", State: "queued", Queue: "q", Token: "tok-a", Host: "h1", LeaseExpires: at(60),
		Created: at(1), Attempt: 1, BootID: "b1", LeaseUntil: 60_000}
	if got := e.run("run-a"); got != wantRun {
		t.Errorf("claimed run\ngot  %+v\nwant %+v", got, wantRun)
	}
	if v := e.runView("run-a"); v.Worker != "w1" || v.State != "queued" || v.CreatedAt != at(1) || v.ExitCode != nil {
		t.Errorf("claimed run as shown: %+v", v)
	}
	if st, err := e.s.RunState(ctx, "run-a"); st != "queued" || err != nil {
		t.Errorf("RunState = %q, %v", st, err)
	}
	for _, err := range []error{
		func() error { _, err := e.s.RunGet(ctx, "nope"); return err }(),
		func() error { _, err := e.s.RunState(ctx, "nope"); return err }(),
		func() error { _, err := e.s.RunViewGet(ctx, "nope"); return err }(),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a read of no run: %v, want ErrNotFound", err)
		}
	}
	live, err := e.s.RunsLiveOnHost(ctx, "h1")
	if err != nil || len(live) != 2 || live[0].Worker != "w1" {
		t.Errorf("RunsLiveOnHost(h1) = %+v, %v", live, err)
	}
	if live, err := e.s.RunsLiveOnHost(ctx, "h2"); len(live) != 0 || err != nil {
		t.Errorf("RunsLiveOnHost(h2) = %+v, %v", live, err)
	}
	// A claim of a task no longer todo fails.
	if err := e.s.Write(ctx, func(tx store.Tx) error { return claim(tx, "q", "w2", "h2", at(2), lease, "c", "a") }); err == nil {
		t.Error("a claim of a doing task succeeded")
	}
	if tk := e.task("c"); tk.State != "todo" {
		t.Errorf("the failed claim left c %s", tk.State)
	}

	// Starts: the token fences; the start is no earlier than the creation.
	start := func(s store.RunStart) string {
		t.Helper()
		var task string
		e.write(func(tx store.Tx) error {
			var err error
			task, err = tx.RunStart(ctx, s)
			return err
		})
		return task
	}
	if task := start(store.RunStart{RunID: "run-a", Token: "tok-b", At: at(2), Pid: 1, Pgid: 1}); task != "" || e.run("run-a") != wantRun {
		t.Errorf("a start under another token applied: %q", task)
	}
	if task := start(store.RunStart{RunID: "run-a", Token: "tok-a", At: at(0), Pid: 10, Pgid: 11}); task != "a" {
		t.Errorf("RunStart = %q, want a", task)
	}
	wantRun.State, wantRun.Started, wantRun.Pgid = "running", at(1), 11
	if got := e.run("run-a"); got != wantRun {
		t.Errorf("started run\ngot  %+v\nwant %+v", got, wantRun)
	}
	if task := start(store.RunStart{RunID: "run-a", Token: "tok-a", At: at(3), Pid: 12, Pgid: 13}); task != "" {
		t.Errorf("a second start applied: %q", task)
	}

	// Renewals: the token and a valid lease fence.
	renew := func(id, token string, l store.Lease, now store.LeaseClock) string {
		t.Helper()
		var st string
		e.write(func(tx store.Tx) error {
			var err error
			st, err = tx.RunLeaseRenew(ctx, id, token, l, now)
			return err
		})
		return st
	}
	next := store.Lease{Expires: at(120), BootID: "b1", UntilNS: 120_000}
	for _, c := range []struct {
		why   string
		token string
		now   store.LeaseClock
	}{
		{"another token", "tok-b", store.LeaseClock{Wall: at(30), BootID: "b1", BootNS: 30_000}},
		{"expired on the boot clock", "tok-a", store.LeaseClock{Wall: at(30), BootID: "b1", BootNS: 60_001}},
		{"at its expiry", "tok-a", store.LeaseClock{Wall: at(30), BootID: "b1", BootNS: 60_000}},
		{"of another boot", "tok-a", store.LeaseClock{Wall: at(30), BootID: "b2", BootNS: 1}},
		{"expired on the wall clock (no boot clock)", "tok-a", store.LeaseClock{Wall: at(61)}},
	} {
		if st := renew("run-a", c.token, next, c.now); st != "" || e.run("run-a") != wantRun {
			t.Errorf("a renewal %s applied: %q, %+v", c.why, st, e.run("run-a"))
		}
	}
	// Valid on the boot clock though past on the wall clock.
	if st := renew("run-a", "tok-a", next, store.LeaseClock{Wall: at(100), BootID: "b1", BootNS: 59_999}); st != "running" {
		t.Errorf("RunLeaseRenew = %q, want running", st)
	}
	wantRun.LeaseExpires, wantRun.LeaseUntil = at(120), 120_000
	if got := e.run("run-a"); got != wantRun {
		t.Errorf("renewed run\ngot  %+v\nwant %+v", got, wantRun)
	}
	// A renewal with no boot clock leaves the run on the wall clock; a
	// queued run renews too.
	if st := renew("run-b", "tok-b", wallLease(at(90)), store.LeaseClock{Wall: at(30)}); st != "queued" {
		t.Errorf("RunLeaseRenew of a queued run = %q", st)
	}
	if r := e.run("run-b"); r.LeaseExpires != at(90) || r.BootID != "" || r.LeaseUntil != 0 {
		t.Errorf("renewed on the wall clock: %+v", r)
	}

	// Expired leases, by the rules.
	expired := func(now store.LeaseClock, want ...string) {
		t.Helper()
		got, err := e.s.RunsLeaseExpired(ctx, now)
		if got = sorted(got); err != nil || !slices.Equal(got, want) {
			t.Errorf("RunsLeaseExpired(%+v) = %v, %v; want %v", now, got, err, want)
		}
	}
	expired(store.LeaseClock{Wall: at(89), BootID: "b1", BootNS: 120_000})
	expired(store.LeaseClock{Wall: at(91), BootID: "b1", BootNS: 120_000}, "run-b")
	expired(store.LeaseClock{Wall: at(0), BootID: "b1", BootNS: 120_001}, "run-a")
	expired(store.LeaseClock{Wall: at(0), BootID: "b2"}, "run-a")
	expired(store.LeaseClock{Wall: at(100)}, "run-b")
	expired(store.LeaseClock{Wall: at(121)}, "run-a", "run-b")

	// The run CAS: state, token, and the reaper's expiry guard.
	update := func(u store.RunUpdate) bool {
		t.Helper()
		var ok bool
		e.write(func(tx store.Tx) error {
			var err error
			ok, err = tx.RunUpdate(ctx, u)
			return err
		})
		return ok
	}
	exit := 3
	notYet := store.LeaseClock{Wall: at(100), BootID: "b1", BootNS: 100_000}
	past := store.LeaseClock{Wall: at(100), BootID: "b1", BootNS: 130_000}
	for _, u := range []store.RunUpdate{
		{ID: "run-a", From: "queued", To: "failed"},
		{ID: "run-a", From: "running", To: "failed", Token: "tok-b"},
		{ID: "run-a", From: "running", To: "failed", Token: "tok-a", ExpiredAt: &notYet},
		{ID: "nope", From: "running", To: "failed"},
	} {
		if update(u) {
			t.Errorf("%+v applied", u)
		}
	}
	if got := e.run("run-a"); got != wantRun {
		t.Errorf("changed by updates that did not apply: %+v", got)
	}
	if !update(store.RunUpdate{ID: "run-a", From: "running", To: "running", Token: "tok-a", Reason: "first"}) {
		t.Error("RunUpdate of the reason did not apply")
	}
	if !update(store.RunUpdate{ID: "run-a", From: "running", To: "timeout", Token: "tok-a", ExpiredAt: &past,
		Set: store.SetRunEndedAt | store.SetRunExit, EndedAt: at(100), ExitCode: &exit, Signal: "KILL", Error: "lost"}) {
		t.Error("the reaper's RunUpdate did not apply")
	}
	if v := e.runView("run-a"); v.State != "timeout" || v.Reason != "first" || v.EndedAt != at(100) || v.ExitCode == nil ||
		*v.ExitCode != 3 || v.Signal != "KILL" || v.Error != "lost" || v.StartedAt != at(1) {
		t.Errorf("after the reaper's update: %+v", v)
	}
	if !update(store.RunUpdate{ID: "run-b", From: "queued", To: "cancelled", Reason: "user", Set: store.SetRunEndedAt | store.SetRunExit, EndedAt: at(5)}) {
		t.Error("RunUpdate with any token did not apply")
	}
	if v := e.runView("run-b"); v.State != "cancelled" || v.Reason != "user" || v.ExitCode != nil || v.EndedAt != at(5) {
		t.Errorf("after a cancel: %+v", v)
	}
	if live, err := e.s.RunsLiveOnHost(ctx, "h1"); len(live) != 0 || err != nil {
		t.Errorf("RunsLiveOnHost(h1) after every run ended = %+v, %v", live, err)
	}
}

// testRunsBatched: RunsStart, RunsSucceed and TasksDone store what one
// RunStart, RunUpdate and TaskUpdate per row store, skip what does not
// apply, and take a row given twice once.
func testRunsBatched(t *testing.T, b Backend) {
	const n = 12
	id := func(i int) string { return fmt.Sprintf("t%02d", i) }
	setup := func() *env {
		e := newEnv(t, b)
		e.write(func(tx store.Tx) error {
			var ids []string
			for i := range n {
				key := ""
				if i%4 == 0 {
					key = fmt.Sprintf("k%d", i)
				}
				if err := enqueue(tx, store.Task{ID: id(i), Key: key}, at(0)); err != nil {
					return err
				}
				ids = append(ids, id(i))
			}
			if err := tx.TaskCreateInbox(ctx, store.Task{ID: "after", Queue: "q", Spec: "{}", DepsLeft: 1}, at(0)); err != nil {
				return err
			}
			if err := tx.TaskDepsAdd(ctx, "after", []string{id(5)}); err != nil {
				return err
			}
			return claim(tx, "q", "w", "h", at(1), wallLease(at(60)), ids...)
		})
		return e
	}
	one, many := setup(), setup()
	// Starts: t03's under a wrong token, t00's given twice (the first
	// counts), t07's before its run's creation.
	var starts []store.RunStart
	for i := range n {
		s := store.RunStart{RunID: "run-" + id(i), Token: "tok-" + id(i), At: at(2 + i), Pid: 100 + i, Pgid: 200 + i}
		switch i {
		case 3:
			s.Token = "wrong"
		case 7:
			s.At = at(0)
		}
		starts = append(starts, s)
	}
	starts = append(starts, store.RunStart{RunID: "run-" + id(0), Token: "tok-" + id(0), At: at(40), Pid: 1, Pgid: 1})
	one.write(func(tx store.Tx) error {
		for _, s := range starts {
			if _, err := tx.RunStart(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	many.write(func(tx store.Tx) error { return tx.RunsStart(ctx, starts) })
	for i, s := range starts {
		want := ""
		if i < n && i != 3 {
			want = id(i)
		}
		if s.TaskID != want {
			t.Errorf("RunsStart set start %d's TaskID to %q, want %q", i, s.TaskID, want)
		}
	}
	compare := func(what string) {
		t.Helper()
		for i := range n {
			r := "run-" + id(i)
			if a, b := one.run(r), many.run(r); a != b {
				t.Errorf("%s: run %s\none by one %+v\nbatched    %+v", what, r, a, b)
			}
			if a, b := one.runView(r), many.runView(r); viewKey(a) != viewKey(b) {
				t.Errorf("%s: run %s as shown\none by one %+v\nbatched    %+v", what, r, a, b)
			}
			if a, b := one.task(id(i)), many.task(id(i)); a != b {
				t.Errorf("%s: task %s\none by one %+v\nbatched    %+v", what, id(i), a, b)
			}
		}
	}
	compare("started")
	if r := many.run("run-" + id(7)); r.Started != at(1) {
		t.Errorf("a start before the run's creation stored at %s, want %s", r.Started, at(1))
	}
	if r := many.run("run-" + id(0)); r.Started != at(2) {
		t.Errorf("a run started twice stored the start at %s, want the first, %s", r.Started, at(2))
	}

	// Successes: every running run, t01's given twice, t03's (still
	// queued) not ended; t02's without an exit code.
	var ends []store.RunEnd
	var doneIDs []string
	for i := range n {
		code := i
		e := store.RunEnd{RunID: "run-" + id(i), Token: "tok-" + id(i), EndedAt: at(50 + i), ExitCode: &code, Signal: "", Error: ""}
		if i == 2 {
			e.ExitCode, e.Error = nil, "no code"
		}
		if i == 6 {
			e.Signal = "TERM"
		}
		ends = append(ends, e)
		if i != 3 {
			doneIDs = append(doneIDs, id(i))
		}
	}
	ends = append(ends, store.RunEnd{RunID: "run-" + id(1), Token: "tok-" + id(1), EndedAt: at(99)})
	one.write(func(tx store.Tx) error {
		for _, e := range ends[:n] {
			ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: e.RunID, From: "running", To: "succeeded", Token: e.Token,
				Set: store.SetRunEndedAt | store.SetRunExit, EndedAt: e.EndedAt, ExitCode: e.ExitCode, Signal: e.Signal, Error: e.Error})
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			tk, err := tx.TaskGet(ctx, e.RunID[len("run-"):])
			if err != nil {
				return err
			}
			if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: tk.ID, From: "doing", To: "done", At: at(70),
				Set: store.SetLaneHead | store.SetBlockedReason | store.SetFinishedAt | store.SetReason, FinishedAt: at(70)}); !ok || err != nil {
				return fmt.Errorf("task %s done: %v, %w", tk.ID, ok, err)
			}
		}
		return nil
	})
	var summaries []store.RunView
	var done map[string]store.DoneTask
	many.write(func(tx store.Tx) error {
		var err error
		if summaries, err = tx.RunsSucceed(ctx, ends); err != nil {
			return err
		}
		done, err = tx.TasksDone(ctx, at(70), append(slices.Clone(doneIDs), id(3)+"-none"))
		return err
	})
	compare("ended")
	if len(summaries) != n-1 {
		t.Errorf("RunsSucceed returned %d runs, want %d", len(summaries), n-1)
	}
	for _, s := range summaries {
		want, err := many.s.RunViewGet(ctx, s.ID)
		if err != nil || summaryKey(s) != summaryKey(*want) {
			t.Errorf("RunsSucceed returned %+v; stored %+v, %v", s, want, err)
		}
	}
	if len(done) != len(doneIDs) {
		t.Errorf("TasksDone returned %d tasks, want %d", len(done), len(doneIDs))
	}
	for _, tid := range doneIDs {
		want := store.DoneTask{Key: many.task(tid).Key, Dependents: tid == id(5)}
		if done[tid] != want {
			t.Errorf("TasksDone gave %s as %+v, want %+v", tid, done[tid], want)
		}
	}
	if v := many.runView("run-" + id(2)); v.ExitCode != nil || v.Error != "no code" {
		t.Errorf("an end without an exit code: %+v", v)
	}
	// Clamped: an end before the start is stored at the start.
	many.write(func(tx store.Tx) error {
		if err := tx.RunsStart(ctx, []store.RunStart{{RunID: "run-" + id(3), Token: "tok-" + id(3), At: at(30)}}); err != nil {
			return err
		}
		_, err := tx.RunsSucceed(ctx, []store.RunEnd{{RunID: "run-" + id(3), Token: "tok-" + id(3), EndedAt: at(10), Clamp: true}})
		return err
	})
	if v := many.runView("run-" + id(3)); v.State != "succeeded" || v.EndedAt != at(30) {
		t.Errorf("a clamped end: %+v, want ended at %s", v, at(30))
	}
}

// viewKey and summaryKey are a run as shown, its exit code by value.
func viewKey(v store.RunView) string {
	code := deref(v.ExitCode)
	v.ExitCode = nil
	return fmt.Sprintf("%+v exit %v", v, code)
}

func summaryKey(s store.RunView) string {
	code := deref(s.ExitCode)
	s.ExitCode = nil
	return fmt.Sprintf("%+v exit %v", s, code)
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// testClaimRace: racers claim from a queue with a concurrency limit, as
// the domain claims (ClaimQueues, then ClaimHeads up to the room left,
// then ClaimTasks, in one transaction), and end their runs in other
// transactions: the limit holds after every claim, and every task is
// claimed exactly once.
func testClaimRace(t *testing.T, b Backend) {
	const tasks, limit = 30, 3
	id := func(i int) string { return fmt.Sprintf("c%02d", i) }
	runRace(t, b, race{
		setup: func(e *env) {
			e.write(func(tx store.Tx) error {
				for i := range tasks {
					if err := enqueue(tx, store.Task{ID: id(i), Queue: "lim", Priority: i % 2}, at(0)); err != nil {
						return err
					}
				}
				_, err := tx.QueueUpdate(ctx, store.QueueUpdate{Name: "lim", At: at(0), Set: store.SetQueueConcurrency, Concurrency: limit})
				return err
			})
		},
		work: func(s store.Store, racer int) error {
			for round := 0; ; round++ {
				if round > 20_000 {
					return errors.New("no end in sight")
				}
				var mine []string
				var empty bool
				err := s.Write(ctx, func(tx store.Tx) error {
					qs, err := tx.ClaimQueues(ctx, []string{"lim"})
					if err != nil || len(qs) != 1 {
						return fmt.Errorf("ClaimQueues = %v, %w", qs, err)
					}
					room := min(qs[0].Concurrency-qs[0].Live, 2)
					heads, err := tx.ClaimHeads(ctx, "lim", max(room, 1), nil)
					if err != nil {
						return err
					}
					empty = len(heads) == 0
					if room <= 0 || empty {
						return nil
					}
					heads = heads[:min(len(heads), room)]
					for _, h := range heads {
						mine = append(mine, h.ID)
					}
					if err := claim(tx, "lim", fmt.Sprint(racer), "h", at(1), wallLease(at(60)), mine...); err != nil {
						return err
					}
					// Counted apart from ClaimQueues: every racer's host is h.
					live, err := tx.RunsLiveOnHost(ctx, "h")
					if err == nil && len(live) > limit {
						err = fmt.Errorf("%d live runs in a queue of concurrency %d", len(live), limit)
					}
					return err
				})
				if err != nil {
					return err
				}
				if len(mine) == 0 {
					if empty {
						return nil
					}
					continue
				}
				err = s.Write(ctx, func(tx store.Tx) error {
					for _, tid := range mine {
						if ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-" + tid, From: "queued", To: "succeeded", Token: "tok-" + tid,
							Set: store.SetRunEndedAt, EndedAt: at(2)}); !ok || err != nil {
							return fmt.Errorf("end run-%s: %v, %w", tid, ok, err)
						}
						if err := finish(tx, tid, "doing", "done", at(2)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
		},
		check: func(e *env, _ []int) {
			for i := range tasks {
				tk := e.task(id(i))
				runs, err := e.s.RunViewList(ctx, id(i))
				if tk.State != "done" || tk.Attempts != 1 || len(runs) != 1 || err != nil {
					e.t.Errorf("%s: %s, %d attempts, runs %+v, %v", id(i), tk.State, tk.Attempts, runs, err)
				}
			}
		},
	})
}

// testCompletion: shell completion's reads: tasks not yet terminal first,
// then terminal ones, each newest first, up to the limit, whether the
// prefix is read whole (narrow) or not; queues by name.
func testCompletion(t *testing.T, b Backend) {
	e := newEnv(t, b)
	var live, ended []string // newest first
	e.write(func(tx store.Tx) error {
		for i := range 12 {
			tid := fmt.Sprintf("a%02d", i)
			q := []string{"q1", "q2"}[i%2]
			var err error
			switch i % 4 {
			case 0:
				err = enqueue(tx, store.Task{ID: tid, Queue: q}, at(i))
				if err == nil {
					err = finish(tx, tid, "todo", []string{"done", "failed", "cancelled"}[i%3], at(i))
				}
				ended = append([]string{tid}, ended...)
			case 1:
				if err = tx.QueueEnsure(ctx, q, at(i)); err == nil {
					err = tx.TaskCreateInbox(ctx, store.Task{ID: tid, Queue: q, Spec: spec(tid)}, at(i))
				}
				live = append([]string{tid}, live...)
			case 2:
				err = enqueue(tx, store.Task{ID: tid, Queue: q, State: "blocked", Hold: true}, at(i))
				live = append([]string{tid}, live...)
			case 3:
				err = enqueue(tx, store.Task{ID: tid, Queue: q}, at(i))
				live = append([]string{tid}, live...)
			}
			if err != nil {
				return err
			}
		}
		return enqueue(tx, store.Task{ID: "b1", Queue: "q3"}, at(20))
	})
	all := append(append([]string{}, live...), ended...)
	for _, c := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"a", 100, all},
		{"a", 5, all[:5]},
		{"a", 11, all[:11]},
		{"a0", 100, filterPrefix(all, "a0")},
		{"", 3, append([]string{"b1"}, live[:2]...)},
		{"z", 5, nil},
		{"a", 0, nil},
	} {
		for _, narrow := range []int{1, 1000} {
			hints, err := e.s.CompletionTasks(ctx, c.prefix, c.limit, narrow)
			var got []string
			for _, h := range hints {
				got = append(got, h.ID)
				if tk := e.task(h.ID); h != (store.TaskHint{ID: tk.ID, State: tk.State, Queue: tk.Queue, Spec: tk.Spec}) {
					t.Errorf("CompletionTasks gave %+v for %+v", h, tk)
				}
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("CompletionTasks(%q, %d, narrow %d) = %v, %v; want %v", c.prefix, c.limit, narrow, got, err, c.want)
			}
		}
	}
	if qs, err := e.s.CompletionQueues(ctx); !slices.Equal(qs, []string{"q1", "q2", "q3"}) || err != nil {
		t.Errorf("CompletionQueues = %v, %v", qs, err)
	}
}

func filterPrefix(ids []string, prefix string) []string {
	var out []string
	for _, id := range ids {
		if len(id) >= len(prefix) && id[:len(prefix)] == prefix {
			out = append(out, id)
		}
	}
	return out
}

// testRunReads: the reads of runs for cleanup, views and the health
// figures, and the steps of a user's cancel; a task's deletion takes its
// runs.
func testRunReads(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"a", "b", "c", "d"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		if err := claim(tx, "q", "w1", "h", at(1), wallLease(at(60)), "a", "b", "c"); err != nil {
			return err
		}
		if err := claim(tx, "q", "w2", "h", at(1), wallLease(at(60)), "d"); err != nil {
			return err
		}
		for _, id := range []string{"a", "b", "c"} {
			if _, err := tx.RunStart(ctx, store.RunStart{RunID: "run-" + id, Token: "tok-" + id, At: at(2)}); err != nil {
				return err
			}
		}
		for id, end := range map[string]struct {
			run, task, at string
		}{"a": {"succeeded", "done", at(5)}, "b": {"failed", "failed", at(8)}} {
			if ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-" + id, From: "running", To: end.run, Set: store.SetRunEndedAt, EndedAt: end.at}); !ok || err != nil {
				return fmt.Errorf("end run-%s: %v, %w", id, ok, err)
			}
			if err := finish(tx, id, "doing", end.task, end.at); err != nil {
				return err
			}
		}
		return nil
	})
	// A user's cancel of c's run: running → cancelling, its reason set.
	var ok bool
	e.write(func(tx store.Tx) error {
		var err error
		if ok, err = tx.RunCancelStep(ctx, store.RunCancel{ID: "run-c", From: "queued", To: "cancelling", Reason: "user"}); ok || err != nil {
			return fmt.Errorf("a cancel step from another state applied: %v, %w", ok, err)
		}
		ok, err = tx.RunCancelStep(ctx, store.RunCancel{ID: "run-c", From: "running", To: "cancelling", Reason: "user"})
		return err
	})
	if v := e.runView("run-c"); !ok || v.State != "cancelling" || v.Reason != "user" || v.EndedAt != "" {
		t.Errorf("after a cancel step: %v, %+v", ok, v)
	}
	if ids, err := e.s.RunCancellingIDs(ctx, "w1"); !slices.Equal(ids, []string{"run-c"}) || err != nil {
		t.Errorf("RunCancellingIDs(w1) = %v, %v", ids, err)
	}
	if ids, err := e.s.RunCancellingIDs(ctx, "w2"); len(ids) != 0 || err != nil {
		t.Errorf("RunCancellingIDs(w2) = %v, %v", ids, err)
	}
	if id, st, err := e.s.RunLiveOfTask(ctx, "c"); id != "run-c" || st != "cancelling" || err != nil {
		t.Errorf("RunLiveOfTask(c) = %s, %s, %v", id, st, err)
	}
	if id, st, err := e.s.RunLiveOfTask(ctx, "a"); id != "" || st != "" || err != nil {
		t.Errorf("RunLiveOfTask(a), ended = %s, %s, %v", id, st, err)
	}
	counts := map[string]int{}
	if err := e.s.WorkerRunCounts(ctx, func(w string, n int) { counts[w] = n }); err != nil || fmt.Sprint(counts) != "map[w1:1 w2:1]" {
		t.Errorf("WorkerRunCounts = %v, %v", counts, err)
	}
	e.write(func(tx store.Tx) error {
		ok, err := tx.RunCancelStep(ctx, store.RunCancel{ID: "run-c", From: "cancelling", To: "cancelled", EndedAt: at(9)})
		if !ok || err != nil {
			return fmt.Errorf("the cancel's end: %v, %w", ok, err)
		}
		return finish(tx, "c", "doing", "cancelled", at(9))
	})
	if v := e.runView("run-c"); v.State != "cancelled" || v.Reason != "user" || v.EndedAt != at(9) {
		t.Errorf("after the cancel's end (its reason kept): %+v", v)
	}
	// The health figures of ended runs.
	ended := map[string]int{}
	if err := e.s.RunEndedCounts(ctx, at(6), func(st string, n int) { ended[st] = n }); err != nil || fmt.Sprint(ended) != "map[cancelled:1 failed:1]" {
		t.Errorf("RunEndedCounts(since %s) = %v, %v", at(6), ended, err)
	}
	if avg, ok, err := e.s.RunEndedAvgSeconds(ctx, at(0)); !ok || err != nil || math.Abs(avg-16.0/3) > 0.01 {
		t.Errorf("RunEndedAvgSeconds = %v, %v, %v; want 5.33 (runs of 3, 6 and 7 s)", avg, ok, err)
	}
	if avg, ok, err := e.s.RunEndedAvgSeconds(ctx, at(6)); !ok || err != nil || math.Abs(avg-6.5) > 0.01 {
		t.Errorf("RunEndedAvgSeconds(since %s) = %v, %v, %v; want 6.5", at(6), avg, ok, err)
	}
	if _, ok, err := e.s.RunEndedAvgSeconds(ctx, at(10)); ok || err != nil {
		t.Errorf("RunEndedAvgSeconds of none = %v, %v", ok, err)
	}
	if views, err := e.s.RunViewList(ctx, "a"); len(views) != 1 || views[0].ID != "run-a" || err != nil {
		t.Errorf("RunViewList(a) = %+v, %v", views, err)
	}
	// Cleanup's reads, then a deletion.
	if ids, err := e.s.RunIDsOfTasks(ctx, []string{"a", "b", "none"}); !slices.Equal(sorted(ids), []string{"run-a", "run-b"}) || err != nil {
		t.Errorf("RunIDsOfTasks = %v, %v", ids, err)
	}
	if ids, err := e.s.RunStored(ctx, []string{"run-b", "nope", "run-a"}); !slices.Equal(sorted(ids), []string{"run-a", "run-b"}) || err != nil {
		t.Errorf("RunStored = %v, %v", ids, err)
	}
	list := func(after, afterID, before string, limit int, want ...string) {
		t.Helper()
		got, err := e.s.RunEndedList(ctx, after, afterID, before, limit)
		var ids []string
		for _, r := range got {
			ids = append(ids, r.TaskID+"/"+r.RunID+"@"+r.EndedAt)
		}
		if err != nil || !slices.Equal(ids, want) {
			t.Errorf("RunEndedList(%s, %s, %s, %d) = %v, %v; want %v", after, afterID, before, limit, ids, err, want)
		}
	}
	ra, rb, rc := "a/run-a@"+at(5), "b/run-b@"+at(8), "c/run-c@"+at(9)
	list("", "", at(20), 10, ra, rb, rc)
	list("", "", at(20), 2, ra, rb)
	list(at(5), "run-a", at(20), 10, rb, rc)
	list(at(5), "", at(9), 10, ra, rb)
	e.write(func(tx store.Tx) error {
		_, _, err := tx.TaskDelete(ctx, "done", []string{"a"})
		return err
	})
	if _, err := e.s.RunGet(ctx, "run-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run-a after its task's deletion: %v", err)
	}
	if ids, err := e.s.RunStored(ctx, []string{"run-a", "run-b"}); !slices.Equal(ids, []string{"run-b"}) || err != nil {
		t.Errorf("RunStored after a deletion = %v, %v", ids, err)
	}
}

// testFixtureRunAdd: the test-only write stores a run exactly as given,
// and refuses a run of no task.
func testFixtureRunAdd(t *testing.T, b Backend) {
	e := newEnv(t, b)
	exit := 3
	want := store.RunView{ID: "r1", TaskID: "a", Attempt: 2, State: "failed", ExitCode: &exit, Signal: "SIGTERM",
		Worker: "w", Error: "boom", CreatedAt: at(1), StartedAt: at(2), EndedAt: at(3)}
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "a"}, at(0)); err != nil {
			return err
		}
		fx, ok := tx.(store.Fixtures)
		if !ok {
			return fmt.Errorf("%s's transactions have no fixtures", b.Name)
		}
		if err := fx.FixtureRunAdd(ctx, want, "q2"); err != nil {
			return err
		}
		if err := fx.FixtureRunAdd(ctx, store.RunView{ID: "r2", TaskID: "nope", Attempt: 1, State: "failed", CreatedAt: at(1)}, "q"); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("FixtureRunAdd of no task = %w, want ErrNotFound", err)
		}
		return nil
	})
	if got := e.runView("r1"); !reflect.DeepEqual(got, want) {
		t.Errorf("run stored as %+v, want %+v", got, want)
	}
	if got := e.run("r1"); got.Queue != "q2" || got.Token != "" {
		t.Errorf("run's queue and token = %q, %q; want q2 and none", got.Queue, got.Token)
	}
}
