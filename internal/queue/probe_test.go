package queue_test

import (
	"math"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// TestProbeFailureNeverRetried: a probe task's failed run, whatever its
// failure class (another non-zero exit with the queue's budget left, exit
// 75, a timeout, a lost worker running or not yet started, a start
// timeout, a command that cannot start), ends the task failed at once,
// spending no budget; the same task without --probe is retried (blocked
// for a retry), except where its class is never retried.
func TestProbeFailureNeverRetried(t *testing.T) {
	t.Parallel()
	finish := func(o queue.Outcome) func(*testing.T, *runBundle, *queue.Claimed) {
		return func(t *testing.T, b *runBundle, c *queue.Claimed) {
			t.Helper()
			if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	reap := func(start bool) func(*testing.T, *runBundle, *queue.Claimed) {
		return func(t *testing.T, b *runBundle, c *queue.Claimed) {
			t.Helper()
			if start {
				if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
					t.Fatal(err)
				}
			}
			b.clk.Add(91 * time.Second)
			if reaped, err := b.st.ReapExpired(b.ctx); err != nil || len(reaped) != 1 {
				t.Fatalf("reap = %v, %v", reaped, err)
			}
		}
	}
	cases := []struct {
		name       string
		fail       func(*testing.T, *runBundle, *queue.Claimed)
		otherState string // the task's state after the same failure without --probe
		runState   string
	}{
		{"other with the queue's budget", finish(queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}), queue.TaskBlocked, queue.RunFailed},
		{"killed by a signal", finish(queue.Outcome{State: queue.RunFailed, Signal: "SIGKILL"}), queue.TaskBlocked, queue.RunFailed},
		{"transient exit 75", finish(queue.Outcome{State: queue.RunFailed, ExitCode: exit(75), Class: queue.ClassTransient}), queue.TaskBlocked, queue.RunFailed},
		{"timeout", finish(queue.Outcome{State: queue.RunTimeout, Class: queue.ClassTimeout}), queue.TaskBlocked, queue.RunTimeout},
		{"cannot start", finish(queue.Outcome{State: queue.RunFailed, Class: queue.ClassNone, Error: "cannot start"}), queue.TaskFailed, queue.RunFailed},
		{"lease expired running", reap(true), queue.TaskBlocked, queue.RunFailed},
		{"lease expired queued", reap(false), queue.TaskBlocked, queue.RunFailed},
		{"start timeout", func(t *testing.T, b *runBundle, c *queue.Claimed) {
			t.Helper()
			b.clk.Add(11 * time.Minute)
			if n, err := b.st.TimeoutQueuedRuns(b.ctx); err != nil || n != 1 {
				t.Fatalf("start timeouts = %d, %v", n, err)
			}
		}, queue.TaskBlocked, queue.RunTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, probe := range []bool{true, false} {
				b := setupRuns(t)
				// A budget in every class: only the probe mark keeps the
				// probe from being retried.
				two := 2
				if err := b.st.SetQueue(b.ctx, "default", queue.QueueSettings{Retries: &two}); err != nil {
					t.Fatal(err)
				}
				id := b.enqueue(t, queue.Spec{Probe: probe})
				c := b.claim(t)
				if c == nil || c.TaskID != id || c.Spec.Probe != probe {
					t.Fatalf("claim = %+v, want task %s (probe %v)", c, id, probe)
				}
				tc.fail(t, b, c)
				want := tc.otherState
				if probe {
					want = queue.TaskFailed
				}
				tk, err := b.st.Get(b.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if tk.State != want || tk.Attempts != 1 || tk.Probe != probe {
					t.Errorf("probe %v: task %s after %d run(s), probe %v; want %s after 1", probe, tk.State, tk.Attempts, tk.Probe, want)
				}
				if got := b.runState(t, c.RunID); got != tc.runState {
					t.Errorf("probe %v: run %s, want %s", probe, got, tc.runState)
				}
				if !probe {
					continue
				}
				// No budget spent or checked: every class's count is 0,
				// and nothing is left to claim.
				var fails int
				if err := sqlite.DBOf(b.st.Backend()).SQL.QueryRow(
					`SELECT fails_other + fails_transient + fails_timeout FROM tasks WHERE id = ?`, id).Scan(&fails); err != nil {
					t.Fatal(err)
				}
				if fails != 0 {
					t.Errorf("a probe's failure spent %d of its budgets", fails)
				}
				b.clk.Add(2 * time.Hour)
				if n, err := b.st.PromoteDue(b.ctx); err != nil || n != 0 {
					t.Errorf("promote after a probe's failure = %d, %v", n, err)
				}
				if c := b.claim(t); c != nil {
					t.Errorf("a failed probe was claimed again: %+v", c)
				}
				// Its events are recorded as for any run.
				evs, err := b.st.TaskEvents(b.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				var kinds []string
				for _, e := range evs {
					kinds = append(kinds, e.Kind)
				}
				if len(kinds) == 0 || kinds[len(kinds)-1] != "task.failed" {
					t.Errorf("a probe's events = %v, want them to end with task.failed", kinds)
				}
			}
		})
	}
}

// TestProbeRetriesRefused: a probe with a retry budget of its own is
// refused (its failures are never retried); --retries 0 is accepted.
func TestProbeRetriesRefused(t *testing.T) {
	t.Parallel()
	if _, err := (queue.Spec{Cmd: []string{"true"}, Probe: true, Retries: exit(2)}).Normalize(); err == nil || queue.KindOf(err) != queue.Invalid {
		t.Errorf("a probe with --retries 2: %v, want it refused as invalid", err)
	}
	if _, err := (queue.Spec{Cmd: []string{"true"}, Probe: true, Retries: exit(0)}).Normalize(); err != nil {
		t.Errorf("a probe with --retries 0: %v", err)
	}
	sp, err := queue.ParseSpecJSON([]byte(`{"cmd":["false"],"probe":true}`))
	if err != nil || !sp.Probe {
		t.Errorf("a JSONL probe: %+v, %v", sp, err)
	}
}

// TestHealthLeavesProbesOut: cq health's run figures (success rate,
// failed_24h, runs finished, average duration) count no probe run, while
// a failed probe task still shows in the task counts.
func TestHealthLeavesProbesOut(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	run := func(probe bool, o queue.Outcome, d time.Duration) {
		t.Helper()
		b.enqueue(t, queue.Spec{Probe: probe})
		c := b.claim(t)
		if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
			t.Fatal(err)
		}
		b.clk.Add(d)
		if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, o); err != nil {
			t.Fatal(err)
		}
	}
	run(false, queue.Outcome{State: queue.RunSucceeded, ExitCode: exit(0)}, 2*time.Second)
	for range 6 {
		run(true, queue.Outcome{State: queue.RunFailed, ExitCode: exit(1)}, time.Minute)
	}
	run(true, queue.Outcome{State: queue.RunTimeout, Class: queue.ClassTimeout}, time.Minute)
	h, err := b.st.Health(b.ctx, queue.DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if h.SuccessRate == nil || *h.SuccessRate != 1 || h.Failed24h != 0 {
		t.Errorf("success rate %v, failed_24h %d; want 1 and 0 (probes left out)", h.SuccessRate, h.Failed24h)
	}
	if h.RunsFinished[queue.RunFailed] != 0 || h.RunsFinished[queue.RunTimeout] != 0 || h.RunsFinished[queue.RunSucceeded] != 1 {
		t.Errorf("runs finished = %v, want the one that is not a probe", h.RunsFinished)
	}
	if h.AvgDurationSeconds == nil || math.Abs(*h.AvgDurationSeconds-2) > 0.01 {
		t.Errorf("average duration = %v, want 2 s", probeFloat(h.AvgDurationSeconds))
	}
	if h.States[queue.TaskFailed] != 7 {
		t.Errorf("failed tasks = %d, want the 7 probes (still recorded)", h.States[queue.TaskFailed])
	}
}

// probeFloat is *p, or nil.
func probeFloat(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
