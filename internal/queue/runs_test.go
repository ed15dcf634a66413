package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cqclock "github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

type runBundle struct {
	st  *queue.Store
	clk *cqclock.Fake
	ctx context.Context
}

func setupRuns(t *testing.T) *runBundle {
	t.Helper()
	d := storetest.OpenSQLite(t, "")
	clk := cqclock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := queue.New(d.Store())
	st.Now = clk.Now
	st.Boot = cqclock.Following(clk.Now)
	return &runBundle{st: st, clk: clk, ctx: context.Background()}
}

func (b *runBundle) enqueue(t *testing.T, sp queue.Spec) string {
	t.Helper()
	if sp.Cmd == nil && sp.Shell == "" {
		sp.Cmd = []string{"true"}
	}
	n, err := sp.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.st.Create(b.ctx, []queue.Spec{n}, queue.CreateOptions{Enqueue: true})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].ID
}

func (b *runBundle) claim(t *testing.T, queues ...string) *queue.Claimed {
	t.Helper()
	c, err := b.st.Claim(b.ctx, queue.ClaimParams{Worker: "w1", Host: "h", Queues: queues, Lease: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *runBundle) taskState(t *testing.T, id string) string {
	t.Helper()
	tk, err := b.st.Get(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk.State
}

func (b *runBundle) runState(t *testing.T, id string) string {
	t.Helper()
	s, err := b.st.RunState(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func exit(n int) *int { return &n }

// snapshot is everything a refused transition must leave unchanged.
func (b *runBundle) snapshot(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range []string{
		`SELECT * FROM tasks ORDER BY id`, `SELECT * FROM runs ORDER BY id`, `SELECT COUNT(*) FROM events`,
	} {
		queue.WriteRows(t, &sb, sqlite.DBOf(b.st.Backend()).SQL, q)
	}
	return sb.String()
}

// toRunState puts a fresh task's run into the state from and returns the
// claim.
func (b *runBundle) toRunState(t *testing.T, from string) *queue.Claimed {
	t.Helper()
	id := b.enqueue(t, queue.Spec{})
	c := b.claim(t)
	if c == nil || c.TaskID != id {
		t.Fatalf("claim = %+v, want task %s", c, id)
	}
	start := func() {
		if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 100, 100); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(o queue.Outcome) {
		if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, o); err != nil {
			t.Fatal(err)
		}
	}
	switch from {
	case queue.RunQueued:
	case queue.RunRunning:
		start()
	case queue.RunCancelling:
		start()
		if _, _, err := b.st.Cancel(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	case queue.RunSucceeded:
		start()
		finish(queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)})
	case queue.RunFailed:
		start()
		finish(queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)})
	case queue.RunTimeout:
		start()
		finish(queue.Outcome{State: queue.RunTimeout})
	case queue.RunCancelled:
		if _, _, err := b.st.Cancel(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.runState(t, c.RunID); got != from {
		t.Fatalf("setup: run is %s, want %s", got, from)
	}
	return c
}

// tryRun attempts from → to through the API that performs it, and
// reports whether it was accepted.
func (b *runBundle) tryRun(c *queue.Claimed, from, to string) error {
	switch to {
	case queue.RunRunning:
		return b.st.StartRun(b.ctx, c.RunID, c.Token, 101, 101)
	case queue.RunCancelling:
		_, _, err := b.st.Cancel(b.ctx, c.TaskID, "")
		return err
	case queue.RunCancelled:
		if from == queue.RunQueued {
			_, _, err := b.st.Cancel(b.ctx, c.TaskID, "")
			return err
		}
		_, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunCancelled})
		return err
	case queue.RunQueued:
		return errNotThisMove
	default:
		_, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: to, ExitCode: exit(0)})
		return err
	}
}

var errNotThisMove = &queue.Error{Kind: queue.Conflict, Msg: "not this move"}

// TestRunTransitionTable tries every (from, to) pair of the run machine:
// the allowed ones succeed once, the rest are refused and change nothing.
func TestRunTransitionTable(t *testing.T) {
	t.Parallel()
	for _, from := range queue.RunStates {
		for _, to := range queue.RunStates {
			t.Run(from+"->"+to, func(t *testing.T) {
				t.Parallel()
				b := setupRuns(t)
				c := b.toRunState(t, from)
				allowed := queue.RunTransitionAllowed(from, to)
				// running → cancelled is the worker's release (tested
				// below); through FinishRun it is refused.
				if from == queue.RunRunning && to == queue.RunCancelled {
					allowed = false
				}
				if to == queue.RunCancelling && from != queue.RunRunning {
					// The only way to ask for cancelling is a user's cancel
					// of the task, which does other legal things here (ends
					// a queued run cancelled, a blocked task cancelled, or
					// nothing); it must never put this run in cancelling.
					_, _, _ = b.st.Cancel(b.ctx, c.TaskID, "")
					if got := b.runState(t, c.RunID); got == queue.RunCancelling && from != queue.RunCancelling {
						t.Fatalf("cancel moved a %s run to cancelling", from)
					}
					return
				}
				before := b.snapshot(t)
				err := b.tryRun(c, from, to)
				if allowed {
					if err != nil {
						t.Fatalf("%s -> %s refused: %v", from, to, err)
					}
					if got := b.runState(t, c.RunID); got != to {
						t.Fatalf("run is %s, want %s", got, to)
					}
					// Once is all: a second attempt is refused, or (cancel of
					// a run already cancelling) a no-op; either way nothing
					// changes.
					after := b.snapshot(t)
					if err := b.tryRun(c, from, to); err != nil && !queue.IsConflict(err) {
						t.Fatalf("second %s -> %s: %v", from, to, err)
					}
					if b.snapshot(t) != after {
						t.Fatalf("second %s -> %s changed the store", from, to)
					}
					return
				}
				if err == nil {
					t.Fatalf("%s -> %s accepted, want refused", from, to)
				}
				if !queue.IsConflict(err) {
					t.Fatalf("%s -> %s: %v, want a conflict", from, to, err)
				}
				if after := b.snapshot(t); after != before {
					t.Fatalf("refused %s -> %s changed the store:\nbefore %s\nafter  %s", from, to, before, after)
				}
			})
		}
	}
}

func TestReleaseRunReturnsTaskToTodo(t *testing.T) {
	t.Parallel()
	for _, from := range []string{queue.RunQueued, queue.RunRunning} {
		t.Run(from, func(t *testing.T) {
			t.Parallel()
			b := setupRuns(t)
			c := b.toRunState(t, from)
			st, err := b.st.ReleaseRun(b.ctx, c.RunID, c.Token)
			if err != nil {
				t.Fatal(err)
			}
			if st != queue.TaskTodo || b.taskState(t, c.TaskID) != queue.TaskTodo {
				t.Fatalf("task after release = %s, want todo", st)
			}
			runs, _ := b.st.Runs(b.ctx, c.TaskID)
			if runs[0].State != queue.RunCancelled || runs[0].Reason == nil || *runs[0].Reason != "released" {
				t.Fatalf("run after release = %+v", runs[0])
			}
			// The released run spent no budget: the next claim is attempt 2
			// and the task is claimable at once.
			c2 := b.claim(t)
			if c2 == nil || c2.TaskID != c.TaskID || c2.Attempt != 2 {
				t.Fatalf("reclaim = %+v", c2)
			}
		})
	}
}

func TestFencingRefusesEveryWriteOfAStaleWorker(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	c := b.toRunState(t, queue.RunRunning)
	b.clk.Add(91 * time.Second)
	reaped, err := b.st.ReapExpired(b.ctx)
	if err != nil || len(reaped) != 1 {
		t.Fatalf("reap = %v, %v", reaped, err)
	}
	if got := b.taskState(t, c.TaskID); got != queue.TaskBlocked {
		t.Fatalf("task after reap = %s, want blocked (transient retry)", got)
	}
	b.clk.Add(31 * time.Second)
	if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 1 {
		t.Fatalf("promote = %d, %v", n, err)
	}
	c2 := b.claim(t)
	if c2 == nil || c2.Attempt != 2 {
		t.Fatalf("second claim = %+v", c2)
	}
	if err := b.st.StartRun(b.ctx, c2.RunID, c2.Token, 5, 5); err != nil {
		t.Fatal(err)
	}
	before := b.snapshot(t)
	// The first worker comes back: every write it tries is refused, on its
	// own run and, with its token, on the new one.
	if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); !queue.IsConflict(err) {
		t.Fatalf("stale finish: %v", err)
	}
	if _, err := b.st.FinishRun(b.ctx, c2.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); !queue.IsConflict(err) {
		t.Fatalf("stale finish of new run: %v", err)
	}
	if _, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, time.Minute); !queue.IsConflict(err) {
		t.Fatalf("stale renew: %v", err)
	}
	if _, err := b.st.RenewLease(b.ctx, c2.RunID, c.Token, time.Minute); !queue.IsConflict(err) {
		t.Fatalf("stale renew of new run: %v", err)
	}
	if err := b.st.StartRun(b.ctx, c2.RunID, c.Token, 1, 1); !queue.IsConflict(err) {
		t.Fatalf("stale start: %v", err)
	}
	if _, err := b.st.ReleaseRun(b.ctx, c2.RunID, c.Token); !queue.IsConflict(err) {
		t.Fatalf("stale release: %v", err)
	}
	if after := b.snapshot(t); after != before {
		t.Fatal("a fenced write changed the store")
	}
	// The new owner's writes still work.
	if _, err := b.st.RenewLease(b.ctx, c2.RunID, c2.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, err := b.st.FinishRun(b.ctx, c2.RunID, c2.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); err != nil || st != queue.TaskDone {
		t.Fatalf("finish = %s, %v", st, err)
	}
}

// TestStartRefusedByTokenAlone: the start of a run that is still queued
// but whose lease now carries another token is refused for the token
// (lease lost), not for the run's state, and writes nothing; the
// holder of the new token starts it. No operation of the store hands a
// queued run a new token (a token is written once, by the claim), so the
// takeover is written into the store directly: this is the one case in
// which only the token check stands between a stale worker and the run.
func TestStartRefusedByTokenAlone(t *testing.T) {
	t.Parallel()
	for _, perRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("perRow=%v", perRow), func(t *testing.T) {
			t.Parallel()
			b := setupRuns(t)
			if perRow {
				queue.RecordPerRow(b.st)
			}
			c := b.toRunState(t, queue.RunQueued)
			const newToken = "0123456789abcdef0123456789abcdef"
			if _, err := sqlite.DBOf(b.st.Backend()).SQL.ExecContext(b.ctx, `UPDATE runs SET lease_token = ? WHERE id = ?`, newToken, c.RunID); err != nil {
				t.Fatal(err)
			}
			before := b.snapshot(t)
			err := b.st.StartRun(b.ctx, c.RunID, c.Token, 7, 7)
			if !queue.IsConflict(err) || !strings.Contains(err.Error(), "lease lost") {
				t.Fatalf("start with the old token of a queued run = %v; want a conflict saying the lease was lost", err)
			}
			if after := b.snapshot(t); after != before {
				t.Fatal("a start refused for its token changed the store")
			}
			if err := b.st.StartRun(b.ctx, c.RunID, newToken, 8, 8); err != nil {
				t.Fatalf("start with the run's token: %v", err)
			}
			if got := b.runState(t, c.RunID); got != queue.RunRunning {
				t.Fatalf("run is %s, want running", got)
			}
		})
	}
}

func TestReaperNeverTouchesACompletedOrRenewedRun(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	done := b.toRunState(t, queue.RunSucceeded)
	live := b.toRunState(t, queue.RunRunning)
	b.clk.Add(60 * time.Second)
	if _, err := b.st.RenewLease(b.ctx, live.RunID, live.Token, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	b.clk.Add(60 * time.Second) // past the first lease, within the renewed one
	reaped, err := b.st.ReapExpired(b.ctx)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaped %v, %v; want nothing", reaped, err)
	}
	if b.runState(t, done.RunID) != queue.RunSucceeded || b.runState(t, live.RunID) != queue.RunRunning {
		t.Fatal("reaper changed a run it must not touch")
	}
}

// TestRenewExpiredLeaseRefused: a lease that has expired is not renewed,
// even before the reaper has ended its run: the worker has lost the run
// (it must have killed its processes by then), and the run is left for
// the reaper as it was.
func TestRenewExpiredLeaseRefused(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	c := b.toRunState(t, queue.RunRunning) // a 90 s lease
	b.clk.Add(91 * time.Second)
	before := b.snapshot(t)
	if r, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, 90*time.Second); !queue.IsConflict(err) {
		t.Fatalf("renewal of an expired lease = %+v, %v; want a conflict", r, err)
	}
	if after := b.snapshot(t); after != before {
		t.Fatal("a refused renewal changed the store")
	}
	if reaped, err := b.st.ReapExpired(b.ctx); err != nil || len(reaped) != 1 || reaped[0].RunID != c.RunID {
		t.Fatalf("reap = %v, %v; want the run whose renewal was refused", reaped, err)
	}
}

func TestRenewalSeesCancel(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	c := b.toRunState(t, queue.RunRunning)
	if _, _, err := b.st.Cancel(b.ctx, c.TaskID, ""); err != nil {
		t.Fatal(err)
	}
	r, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, time.Minute)
	if err != nil || r.State != queue.RunCancelling {
		t.Fatalf("renew = %+v, %v", r, err)
	}
	// The process ends on its own before the kill: success still wins.
	st, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)})
	if err != nil || st != queue.TaskDone {
		t.Fatalf("finish while cancelling = %s, %v; want done", st, err)
	}
}

func TestRetryBudgetsPerClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		retries *int
		outcome queue.Outcome
		runs    int // runs until the task fails for good
	}{
		{"other default budget 0", nil, queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}, 1},
		{"other --retries 2", exit(2), queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}, 3},
		{"transient 3", nil, queue.Outcome{State: queue.RunFailed, ExitCode: exit(75), Class: queue.ClassTransient}, 4},
		{"timeout 1", nil, queue.Outcome{State: queue.RunTimeout}, 2},
		{"missing handler never", exit(5), queue.Outcome{State: queue.RunFailed, Class: queue.ClassNone}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupRuns(t)
			id := b.enqueue(t, queue.Spec{Retries: tc.retries})
			for i := 1; i <= tc.runs; i++ {
				c := b.claim(t)
				if c == nil {
					t.Fatalf("run %d: nothing to claim (task %s)", i, b.taskState(t, id))
				}
				if c.Attempt != i {
					t.Fatalf("attempt = %d, want %d", c.Attempt, i)
				}
				if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
					t.Fatal(err)
				}
				st, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, tc.outcome)
				if err != nil {
					t.Fatal(err)
				}
				want := queue.TaskBlocked
				if i == tc.runs {
					want = queue.TaskFailed
				}
				if st != want {
					t.Fatalf("after run %d task is %s, want %s", i, st, want)
				}
				if st == queue.TaskBlocked {
					if c := b.claim(t); c != nil {
						t.Fatal("claimed a task still backing off")
					}
					b.clk.Add(2 * time.Hour)
					if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 1 {
						t.Fatalf("promote = %d, %v", n, err)
					}
				}
			}
			// cq retry gives fresh budgets.
			if _, st, err := b.st.Retry(b.ctx, id, ""); err != nil || st != queue.TaskTodo {
				t.Fatalf("retry = %s, %v", st, err)
			}
		})
	}
}

// TestRetryGivesFreshBudgets: cq retry gives every class its whole budget
// again, both to a task that exhausted it (failed) and to one waiting out
// a retry backoff (blocked): its next failure is retried, not final.
func TestRetryGivesFreshBudgets(t *testing.T) {
	t.Parallel()
	classes := []struct {
		name    string
		retries *int
		outcome queue.Outcome
		budget  int
	}{
		{"other --retries 1", exit(1), queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}, 1},
		{"transient", nil, queue.Outcome{State: queue.RunFailed, ExitCode: exit(75), Class: queue.ClassTransient}, 3},
		{"timeout", nil, queue.Outcome{State: queue.RunTimeout}, 1},
	}
	for _, tc := range classes {
		for _, from := range []string{queue.TaskFailed, queue.TaskBlocked} {
			t.Run(tc.name+" from "+from, func(t *testing.T) {
				t.Parallel()
				b := setupRuns(t)
				id := b.enqueue(t, queue.Spec{Retries: tc.retries})
				// runOnce claims the task, runs it to tc.outcome and
				// returns the task's state after that failure.
				runOnce := func() string {
					t.Helper()
					c := b.claim(t)
					if c == nil || c.TaskID != id {
						t.Fatalf("claim = %+v, want task %s (%s)", c, id, b.taskState(t, id))
					}
					if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
						t.Fatal(err)
					}
					st, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, tc.outcome)
					if err != nil {
						t.Fatal(err)
					}
					return st
				}
				promote := func() {
					t.Helper()
					b.clk.Add(2 * time.Hour)
					if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 1 {
						t.Fatalf("promote = %d, %v", n, err)
					}
				}
				// Spend the budget: every failure but the last is retried.
				fails := tc.budget + 1
				if from == queue.TaskBlocked {
					fails = tc.budget
				}
				for i := 1; i <= fails; i++ {
					st := runOnce()
					want := queue.TaskBlocked
					if i == tc.budget+1 {
						want = queue.TaskFailed
					}
					if st != want {
						t.Fatalf("after failure %d the task is %s, want %s", i, st, want)
					}
					if st == queue.TaskBlocked && i < fails {
						promote()
					}
				}
				if _, st, err := b.st.Retry(b.ctx, id, ""); err != nil || st != queue.TaskTodo {
					t.Fatalf("retry from %s = %s, %v; want todo", from, st, err)
				}
				// The whole budget again: budget failures retried, then failed.
				for i := 1; i <= tc.budget+1; i++ {
					st := runOnce()
					want := queue.TaskBlocked
					if i == tc.budget+1 {
						want = queue.TaskFailed
					}
					if st != want {
						t.Fatalf("failure %d after cq retry left the task %s, want %s (a fresh budget of %d)", i, st, want, tc.budget)
					}
					if st == queue.TaskBlocked {
						promote()
					}
				}
			})
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	if d := queue.Backoff(queue.ClassTransient, 1, 0); d != 30*time.Second {
		t.Fatalf("transient 1 = %v", d)
	}
	if d := queue.Backoff(queue.ClassTransient, 3, 0); d != 120*time.Second {
		t.Fatalf("transient 3 = %v", d)
	}
	if d := queue.Backoff(queue.ClassTimeout, 1, 0); d != 5*time.Minute {
		t.Fatalf("timeout = %v", d)
	}
	for n := 1; n <= 20; n++ {
		d := queue.Backoff(queue.ClassOther, n, 30*time.Second)
		ideal := 30 * time.Second * time.Duration(1<<min(n-1, 20))
		lo, hi := time.Duration(float64(min(ideal, time.Hour))*0.8), min(time.Duration(float64(ideal)*1.2), time.Hour)
		if d < lo || d > hi {
			t.Fatalf("other %d = %v, want within [%v, %v]", n, d, lo, hi)
		}
	}
}

func TestClaimOrderLanesLimitsAndPause(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	low := b.enqueue(t, queue.Spec{Priority: "P3"})
	k1 := b.enqueue(t, queue.Spec{Key: "k"})
	k2 := b.enqueue(t, queue.Spec{Key: "k"})
	high := b.enqueue(t, queue.Spec{Priority: "P0"})
	other := b.enqueue(t, queue.Spec{Queue: "slow"})
	other2 := b.enqueue(t, queue.Spec{Queue: "slow"})
	one := 1
	if err := b.st.SetQueue(b.ctx, "slow", queue.QueueSettings{Concurrency: &one}); err != nil {
		t.Fatal(err)
	}
	paused := true
	if err := b.st.SetQueue(b.ctx, "frozen", queue.QueueSettings{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, queue.Spec{Queue: "frozen", Priority: "P0"})

	var got []string
	var claims []*queue.Claimed
	for {
		c := b.claim(t)
		if c == nil {
			break
		}
		got = append(got, c.TaskID)
		claims = append(claims, c)
	}
	// P0 first; then P2 in gateway order: k1 (k2 waits behind it), the
	// first "slow" task (the second waits for the limit); then P3.
	want := []string{high, k1, other, low}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claim order %v, want %v", got, want)
	}
	// Finishing k1 hands the lane to k2; finishing the slow one frees the
	// limit for other2.
	for _, c := range claims {
		if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); err != nil {
			t.Fatal(err)
		}
	}
	got = got[:0]
	for c := b.claim(t); c != nil; c = b.claim(t) {
		got = append(got, c.TaskID)
	}
	if strings.Join(got, ",") != strings.Join([]string{k2, other2}, ",") {
		t.Fatalf("second round %v, want [%s %s]", got, k2, other2)
	}
}

func TestDependencyDoneReleasesAndFailureCancels(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	a := b.enqueue(t, queue.Spec{})
	dep := b.enqueue(t, queue.Spec{After: []string{a}})
	grand := b.enqueue(t, queue.Spec{After: []string{dep}})
	c := b.claim(t)
	if c.TaskID != a {
		t.Fatalf("claimed %s, want %s", c.TaskID, a)
	}
	if b.claim(t) != nil {
		t.Fatal("claimed a task whose dependency is not done")
	}
	_ = b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1)
	if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); err != nil {
		t.Fatal(err)
	}
	if got := b.taskState(t, dep); got != queue.TaskTodo {
		t.Fatalf("dependent after its dependency is done: %s, want todo", got)
	}
	c = b.claim(t)
	_ = b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1)
	if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunFailed, ExitCode: exit(2)}); err != nil {
		t.Fatal(err)
	}
	tk, _ := b.st.Get(b.ctx, grand)
	if tk.State != queue.TaskCancelled || tk.Reason == nil || !strings.Contains(*tk.Reason, dep) {
		t.Fatalf("grand-dependent = %s (%v), want cancelled naming %s", tk.State, tk.Reason, dep)
	}
	if _, _, err := b.st.Retry(b.ctx, grand, ""); !queue.IsConflict(err) {
		t.Fatalf("retry of a task whose dependency failed: %v, want conflict", err)
	}
}

// TestDependencyDoneKeepsADependentsHoldAndSchedule: when its last
// dependency ends done, a dependent that is also held, or scheduled for
// later, stays blocked, now for that reason; one with nothing else goes
// to todo. The batched and the per-row ends both tell the dependents.
func TestDependencyDoneKeepsADependentsHoldAndSchedule(t *testing.T) {
	t.Parallel()
	for _, perRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("perRow=%v", perRow), func(t *testing.T) {
			t.Parallel()
			b := setupRuns(t)
			if perRow {
				queue.RecordPerRow(b.st)
			}
			a := b.enqueue(t, queue.Spec{})
			held := b.enqueue(t, queue.Spec{After: []string{a}, Hold: true})
			later := b.enqueue(t, queue.Spec{After: []string{a}, Delay: "1h"})
			free := b.enqueue(t, queue.Spec{After: []string{a}})
			c := b.claim(t)
			if c == nil || c.TaskID != a {
				t.Fatalf("claim = %+v, want %s", c, a)
			}
			if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
				t.Fatal(err)
			}
			if st, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}); err != nil || st != queue.TaskDone {
				t.Fatalf("finish = %s, %v", st, err)
			}
			for _, w := range []struct{ id, state, reason string }{
				{held, queue.TaskBlocked, queue.BlockedHold},
				{later, queue.TaskBlocked, queue.BlockedScheduled},
				{free, queue.TaskTodo, "<nil>"},
			} {
				tk, err := b.st.Get(b.ctx, w.id)
				if err != nil {
					t.Fatal(err)
				}
				if reason := strOr(tk.BlockedReason); tk.State != w.state || reason != w.reason {
					t.Errorf("dependent %s is %s (%q) after its dependency is done, want %s (%q)", w.id, tk.State, reason, w.state, w.reason)
				}
			}
			// Each then goes on as its own condition says.
			if _, st, err := b.st.Release(b.ctx, held, ""); err != nil || st != queue.TaskTodo {
				t.Fatalf("release of the held dependent = %s, %v; want todo", st, err)
			}
			b.clk.Add(time.Hour + time.Second)
			if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 1 {
				t.Fatalf("promote = %d, %v; want the scheduled dependent", n, err)
			}
			if got := b.taskState(t, later); got != queue.TaskTodo {
				t.Fatalf("scheduled dependent after its time: %s, want todo", got)
			}
		})
	}
}

// TestCycleStartsThenEndsThenClaims: one Cycle records the starts first
// (so a run started and ended in the same transaction goes queued →
// running → succeeded, in that event order), refuses a start whose run
// was cancelled meanwhile without writing anything for it, records the
// ends, then claims.
func TestCycleStartsThenEndsThenClaims(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	fast := b.enqueue(t, queue.Spec{})
	gone := b.enqueue(t, queue.Spec{})
	next := b.enqueue(t, queue.Spec{})
	cf, cg := b.claim(t), b.claim(t)
	if cf == nil || cg == nil || cf.TaskID != fast || cg.TaskID != gone {
		t.Fatalf("claims: %+v %+v", cf, cg)
	}
	if _, _, err := b.st.Cancel(b.ctx, gone, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	goneRun := b.runState(t, cg.RunID)
	res, err := b.st.Cycle(b.ctx,
		[]queue.Start{{RunID: cf.RunID, Token: cf.Token, Pid: 7, Pgid: 7}, {RunID: cg.RunID, Token: cg.Token, Pid: 8, Pgid: 8}},
		[]queue.Finish{{RunID: cf.RunID, Token: cf.Token, Outcome: queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}}},
		&queue.ClaimN{Params: queue.ClaimParams{Worker: "w1", Host: "h", Lease: time.Minute}, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.StartErrs) != 2 || res.StartErrs[0] != nil || !queue.IsConflict(res.StartErrs[1]) {
		t.Fatalf("start errors %v, want [nil conflict]", res.StartErrs)
	}
	if got := b.runState(t, cg.RunID); got != goneRun {
		t.Errorf("refused start changed the run: %s, was %s", got, goneRun)
	}
	if res.Finished[0].Err != nil || res.Finished[0].TaskState != queue.TaskDone {
		t.Fatalf("finish: %+v", res.Finished[0])
	}
	if len(res.Claimed) != 1 || res.Claimed[0].TaskID != next {
		t.Fatalf("claimed %+v, want %s", res.Claimed, next)
	}
	evs, err := sqlite.DBOf(b.st.Backend()).SQL.Query(`SELECT kind FROM events WHERE run_id = ? ORDER BY seq`, cf.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for evs.Next() {
		var k string
		if err := evs.Scan(&k); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	evs.Close()
	if strings.Join(kinds, " ") != "run.queued run.running run.succeeded" {
		t.Errorf("events of the fast run: %v", kinds)
	}
}

// TestReapStopsBeforeTheCommit: ReapExpiredThen calls its stop function
// for each run it ends before the commit, while every other connection
// still sees the run running and its task doing: a lost run's processes
// are killed there, before its task or key lane is free for another run.
func TestReapStopsBeforeTheCommit(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	c := b.toRunState(t, queue.RunRunning)
	b.clk.Add(91 * time.Second)
	var seen []string
	reaped, err := b.st.ReapExpiredThen(b.ctx, func(r queue.Reaped) {
		var run, task string
		if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRowContext(b.ctx, `SELECT r.state, t.state FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = ?`,
			r.RunID).Scan(&run, &task); err != nil {
			t.Error(err)
		}
		seen = append(seen, r.RunID+" "+run+" "+task)
	})
	if err != nil || len(reaped) != 1 {
		t.Fatalf("reap = %v, %v", reaped, err)
	}
	if want := []string{c.RunID + " running doing"}; !slices.Equal(seen, want) {
		t.Fatalf("stop saw %q, want %q (called once, before the commit)", seen, want)
	}
	if got := b.taskState(t, c.TaskID); got != queue.TaskBlocked {
		t.Fatalf("task after the reap = %s, want blocked (transient retry)", got)
	}
}

// TestRunTimesAreTheProcesses: a worker records starts and ends late (a
// start rides with the ends that follow it, several ends share a commit),
// so it gives the times its process started and ended: started_at is that
// time kept between the run's creation and the commit, ended_at between
// the run's start and the commit; with none, the commit's time.
func TestRunTimesAreTheProcesses(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	const unknown = time.Duration(-1) // At left zero
	for _, c := range []struct {
		name   string
		offset time.Duration // At, from the lower bound
		want   string        // "at", "lower" or "commit"
	}{
		{"when the process did it", 2 * time.Millisecond, "at"},
		{"not before the lower bound", -time.Hour, "lower"},
		{"not after the commit", time.Hour, "commit"},
		{"the commit, when unknown", unknown, "commit"},
	} {
		at := func(lower time.Time) time.Time {
			if c.offset == unknown {
				return time.Time{}
			}
			return lower.Add(c.offset)
		}
		check := func(col, runID string, lower, commit time.Time) {
			t.Helper()
			want := map[string]time.Time{"at": lower.Add(c.offset), "lower": lower, "commit": commit}[c.want]
			var got string
			if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRow(`SELECT `+col+` FROM runs WHERE id = ?`, runID).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != queue.FormatTime(want) {
				t.Errorf("%s %s: %s, want %s", col, c.name, got, queue.FormatTime(want))
			}
		}
		b.enqueue(t, queue.Spec{})
		claimed := b.clk.Now()
		cl := b.claim(t)
		b.clk.Add(5 * time.Millisecond)
		errs, err := b.st.StartRuns(b.ctx, []queue.Start{{RunID: cl.RunID, Token: cl.Token, Pid: 7, Pgid: 7, At: at(claimed)}})
		if err != nil || errs[0] != nil {
			t.Fatalf("start: %v %v", err, errs)
		}
		check("started_at", cl.RunID, claimed, b.clk.Now())
		var started string
		if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRow(`SELECT started_at FROM runs WHERE id = ?`, cl.RunID).Scan(&started); err != nil {
			t.Fatal(err)
		}
		b.clk.Add(10 * time.Millisecond)
		lower := queue.ParseStoredTime(started)
		if _, err := b.st.FinishRun(b.ctx, cl.RunID, cl.Token, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0), At: at(lower)}); err != nil {
			t.Fatal(err)
		}
		check("ended_at", cl.RunID, lower, b.clk.Now())
	}
}

// TestBatchedCycleMatchesPerRow: a cycle records its starts with one
// UPDATE and its plain successes with one UPDATE of the runs and one of
// the tasks; everything else (failures, fenced or repeated ends, ends of
// runs a user is cancelling) falls back to one end at a time. The same
// cycles recorded with every start and end on its own must leave the
// same tasks, runs and events, and report the same outcomes, including
// key lanes handed on, dependents released and the claims that follow.
func TestBatchedCycleMatchesPerRow(t *testing.T) {
	t.Parallel()
	batched, perRow := batchedScenario(t, false), batchedScenario(t, true)
	if batched != perRow {
		t.Errorf("batched cycle:\n%s\nper row:\n%s", batched, perRow)
	}
	for _, want := range []string{
		"t1|done|", "t2b|doing|default|k|", "t3d|doing|", "t4|failed|", "t5|doing|", "t6|done|", "t7|done|",
		"finish t5: conflict: run run:t5/1: lease lost", "finish t1: conflict: run run:t1/1 already ended succeeded",
		"run t7/1 succeeded exit=0 error=stdout: no space left on device ended=2026-01-02T03:04:05.050Z",
		"start 7: run run:t1/1 is running, not queued", "run.succeeded|run:t6/1|cancelling|succeeded|",
		"t3d|task.todo|<nil>|blocked|todo|dependencies done|", "claimed t2b attempt 1", "claimed t3d attempt 1",
		`t1|run.queued|run:t1/1|<nil>|queued|<nil>|{"attempt":1,"worker":"w1"}|`,
	} {
		if !strings.Contains(batched, want) {
			t.Errorf("the scenario did not reach %q:\n%s", want, batched)
		}
	}
}

// batchedScenario runs the scenario of TestBatchedCycleMatchesPerRow in a
// new store and returns what it did and left, with run ids and tokens
// replaced by their task and attempt.
func batchedScenario(t *testing.T, perRow bool) string {
	t.Helper()
	b := setupRuns(t)
	if perRow {
		queue.RecordPerRow(b.st)
	}
	for _, sp := range []queue.Spec{
		{ID: "t1"}, {ID: "t2", Key: "k"}, {ID: "t2b", Key: "k"}, {ID: "t3"}, {ID: "t3d", After: []string{"t3"}},
		{ID: "t4"}, {ID: "t5"}, {ID: "t6"}, {ID: "t7"},
	} {
		b.enqueue(t, sp)
	}
	p := queue.ClaimParams{Worker: "w1", Host: "h", Lease: time.Minute}
	claims, err := b.st.ClaimN(b.ctx, p, 10)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	runs := map[string]*queue.Claimed{}
	var pairs []string
	for _, c := range claims {
		runs[c.TaskID] = c
		pairs = append(pairs, c.RunID, "run:"+c.TaskID+"/1", c.Token, "token:"+c.TaskID)
		fmt.Fprintf(&out, "claimed %s\n", c.TaskID)
	}
	b.clk.Add(50 * time.Millisecond)
	var starts []queue.Start
	for _, c := range claims {
		starts = append(starts, queue.Start{RunID: c.RunID, Token: c.Token, Pid: 10, Pgid: 10})
	}
	// One start given twice: the second is refused.
	starts = append(starts, starts[0])
	res, err := b.st.Cycle(b.ctx, starts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res.StartErrs {
		fmt.Fprintf(&out, "start %d: %v\n", i, e)
	}
	if _, _, err := b.st.Cancel(b.ctx, "t6", "stop it"); err != nil {
		t.Fatal(err)
	}
	b.clk.Add(100 * time.Millisecond)
	ok := queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}
	withErr := ok
	withErr.Error = "stdout: no space left on device"
	withErr.At = b.clk.Now().Add(-time.Second) // before the start: kept at it
	fs := []queue.Finish{
		{RunID: runs["t1"].RunID, Token: runs["t1"].Token, Outcome: ok},
		{RunID: runs["t2"].RunID, Token: runs["t2"].Token, Outcome: ok},
		{RunID: runs["t3"].RunID, Token: runs["t3"].Token, Outcome: ok},
		{RunID: runs["t4"].RunID, Token: runs["t4"].Token, Outcome: queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}},
		{RunID: runs["t5"].RunID, Token: "not-its-token", Outcome: ok},
		{RunID: runs["t6"].RunID, Token: runs["t6"].Token, Outcome: ok},
		{RunID: runs["t7"].RunID, Token: runs["t7"].Token, Outcome: withErr},
		{RunID: runs["t1"].RunID, Token: runs["t1"].Token, Outcome: ok},
	}
	res, err = b.st.Cycle(b.ctx, nil, fs, &queue.ClaimN{Params: p, N: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range res.Finished {
		task := []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t1"}[i]
		if f.Err != nil {
			fmt.Fprintf(&out, "finish %s: %v: %s\n", task, queue.KindOf(f.Err), f.Err)
			continue
		}
		r := f.Run
		fmt.Fprintf(&out, "finish %s: task %s; run %s/%d %s exit=%d error=%s ended=%s\n", task, f.TaskState, r.TaskID, r.Attempt, r.State,
			*r.ExitCode, strOr(r.Error), strOr(r.EndedAt))
	}
	for _, c := range res.Claimed {
		fmt.Fprintf(&out, "claimed %s attempt %d\n", c.TaskID, c.Attempt)
		pairs = append(pairs, c.RunID, fmt.Sprintf("run:%s/%d", c.TaskID, c.Attempt), c.Token, "token:"+c.TaskID)
	}
	names := strings.NewReplacer(pairs...)
	for _, q := range []string{
		`SELECT * FROM tasks ORDER BY id`,
		`SELECT * FROM runs ORDER BY task_id, attempt`,
		`SELECT task_id, kind, run_id, from_state, to_state, reason, data, at FROM events ORDER BY task_id, seq`,
	} {
		queue.WriteRows(t, &out, sqlite.DBOf(b.st.Backend()).SQL, q)
	}
	return names.Replace(out.String())
}

func strOr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestCycleOfManyRuns: a cycle of more runs than one batched statement
// takes (300: chunks of 128, 128, 32, 8 and 4) claims, starts and ends
// every one of them exactly once.
func TestCycleOfManyRuns(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	const n = 300
	fill(t, b.st, n, queue.Spec{})
	p := queue.ClaimParams{Worker: "w1", Host: "h", Lease: time.Minute}
	claims, err := b.st.ClaimN(b.ctx, p, n+10)
	if err != nil || len(claims) != n {
		t.Fatalf("claimed %d, %v; want %d", len(claims), err, n)
	}
	starts := make([]queue.Start, n)
	fs := make([]queue.Finish, n)
	for i, c := range claims {
		starts[i] = queue.Start{RunID: c.RunID, Token: c.Token, Pid: 1, Pgid: 1}
		fs[i] = queue.Finish{RunID: c.RunID, Token: c.Token, Outcome: queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}}
	}
	res, err := b.st.Cycle(b.ctx, starts, fs, &queue.ClaimN{Params: p, N: n})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if res.StartErrs[i] != nil || res.Finished[i].Err != nil || res.Finished[i].TaskState != queue.TaskDone {
			t.Fatalf("run %d: start %v, finish %+v", i, res.StartErrs[i], res.Finished[i])
		}
	}
	if len(res.Claimed) != 0 {
		t.Errorf("claimed %d more, with none left", len(res.Claimed))
	}
	var done, runs, events int
	if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRow(`SELECT (SELECT COUNT(*) FROM tasks WHERE state = 'done'),
		(SELECT COUNT(*) FROM runs WHERE state = 'succeeded'),
		(SELECT COUNT(*) FROM events WHERE kind IN ('run.running', 'run.succeeded', 'task.done'))`).Scan(&done, &runs, &events); err != nil {
		t.Fatal(err)
	}
	if done != n || runs != n || events != 3*n {
		t.Errorf("%d tasks done, %d runs succeeded, %d events; want %d, %d, %d", done, runs, events, n, n, 3*n)
	}
}

// TestReaperSaysWhetherTheStartWasRecorded: a run reaped while still
// queued may have run (its worker was lost before recording the start),
// and its error says only what is known.
func TestReaperSaysWhetherTheStartWasRecorded(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	queued := b.toRunState(t, queue.RunQueued)
	running := b.toRunState(t, queue.RunRunning)
	b.clk.Add(91 * time.Second)
	if reaped, err := b.st.ReapExpired(b.ctx); err != nil || len(reaped) != 2 {
		t.Fatalf("reap = %v, %v", reaped, err)
	}
	for _, c := range []struct {
		run, want string
	}{
		{queued.RunID, "lease expired before the start was recorded (worker lost)"},
		{running.RunID, "lease expired (worker lost)"},
	} {
		var state, errText string
		if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRow(`SELECT state, error FROM runs WHERE id = ?`, c.run).Scan(&state, &errText); err != nil {
			t.Fatal(err)
		}
		if state != queue.RunFailed || errText != c.want {
			t.Errorf("reaped run: %s %q, want failed %q", state, errText, c.want)
		}
	}
}
