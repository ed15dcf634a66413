package queue_test

// Health (docs/operations.md, Health): every threshold of the verdict table at its
// boundary, and the figures cq health reports. States no command reaches
// without a worker (runs ended long ago, many tasks blocked for retry)
// are rows written with SQL; the clock is injected.

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// hlFix writes health fixtures straight into the store.
type hlFix struct {
	e       *mntEnv
	n       int
	attempt int
}

func hlSetup(t *testing.T) *hlFix {
	t.Helper()
	e := mntSetup(t)
	f := &hlFix{e: e}
	f.queue("default", false)
	f.queue("runs", false)
	// Runs need a task: one finished carrier holds them all.
	e.exec(`INSERT INTO tasks (id, state, queue, priority, spec, created_at, updated_at, finished_at)
		VALUES ('carrier', 'done', 'runs', 2, '{}', ?, ?, ?)`, f.now(), f.now(), f.now())
	f.heartbeat(0)
	return f
}

func (f *hlFix) now() string { return queue.FormatTime(f.e.clk.Now()) }

func (f *hlFix) ago(d time.Duration) string { return queue.FormatTime(f.e.clk.Now().Add(-d)) }

// queue makes a queue exist, paused or not.
func (f *hlFix) queue(name string, paused bool) {
	f.e.t.Helper()
	if err := f.e.st.SetQueue(f.e.ctx, name, queue.QueueSettings{Paused: &paused}); err != nil {
		f.e.t.Fatal(err)
	}
}

// tasks inserts n tasks in state (with blocked_reason br for blocked ones)
// in queue q.
func (f *hlFix) tasks(n int, state, q, br string) {
	f.e.t.Helper()
	for range n {
		f.n++
		var reason, todoAt any
		if br != "" {
			reason = br
		}
		if state == queue.TaskTodo {
			todoAt = f.now()
		}
		f.e.exec(`INSERT INTO tasks (id, state, queue, priority, spec, blocked_reason, todo_at, lane_head, seq, created_at, updated_at)
			VALUES (?, ?, ?, 2, '{}', ?, ?, 1, ?, ?, ?)`, fmt.Sprintf("t%05d", f.n), state, q, reason, todoAt, f.n, f.now(), f.now())
	}
}

// runs inserts n runs in state that ended endedAgo before now, after
// lasting dur.
func (f *hlFix) runs(n int, state string, endedAgo, dur time.Duration) {
	f.e.t.Helper()
	for range n {
		f.attempt++
		end := f.e.clk.Now().Add(-endedAgo)
		f.e.exec(`INSERT INTO runs (id, task_id, attempt, state, queue, created_at, started_at, ended_at)
			VALUES (?, 'carrier', ?, ?, 'runs', ?, ?, ?)`, fmt.Sprintf("r%05d", f.attempt), f.attempt, state,
			queue.FormatTime(end.Add(-dur)), queue.FormatTime(end.Add(-dur)), queue.FormatTime(end))
	}
}

// live inserts n live runs (queued, running or cancelling) of doing tasks
// in queue q.
func (f *hlFix) live(n int, state, q string) {
	f.e.t.Helper()
	for range n {
		f.tasks(1, queue.TaskDoing, q, "")
		f.attempt++
		f.e.exec(`INSERT INTO runs (id, task_id, attempt, state, queue, created_at, started_at, lease_expires_at)
			VALUES (?, ?, 1, ?, ?, ?, ?, ?)`, fmt.Sprintf("r%05d", f.attempt), fmt.Sprintf("t%05d", f.n), state, q,
			f.now(), f.now(), queue.FormatTime(f.e.clk.Now().Add(time.Hour)))
	}
}

// heartbeat records a heartbeat age ago.
func (f *hlFix) heartbeat(age time.Duration) {
	f.e.t.Helper()
	if err := f.e.st.SetSystemState(f.e.ctx, map[string]string{"last_heartbeat": f.ago(age)}); err != nil {
		f.e.t.Fatal(err)
	}
}

func (f *hlFix) health(th queue.Thresholds) *queue.Health {
	f.e.t.Helper()
	h, err := f.e.st.Health(f.e.ctx, th)
	if err != nil {
		f.e.t.Fatal(err)
	}
	return h
}

func hlRate(h *queue.Health) string {
	if h.SuccessRate == nil {
		return "null"
	}
	return fmt.Sprintf("%.6f", *h.SuccessRate)
}

// TestHealthThresholdBoundaries checks each row of the health table
// at and around its limits, every other row held at ok.
func TestHealthThresholdBoundaries(t *testing.T) {
	const day = 24 * time.Hour
	cases := []struct {
		name  string
		setup func(f *hlFix)
		want  string
		check func(t *testing.T, h *queue.Health)
	}{
		// success rate: > 95 % ok, 80–95 % degraded, < 80 % unhealthy.
		{"success/none finished is ignored", func(f *hlFix) {}, queue.HealthOK, func(t *testing.T, h *queue.Health) {
			if h.SuccessRate != nil {
				t.Errorf("success_rate = %s, want null", hlRate(h))
			}
		}},
		{"success/only cancelled runs finished", func(f *hlFix) { f.runs(5, queue.RunCancelled, time.Minute, time.Second) }, queue.HealthOK,
			func(t *testing.T, h *queue.Health) {
				if h.SuccessRate != nil {
					t.Errorf("success_rate = %s, want null (cancelled runs are not counted)", hlRate(h))
				}
			}},
		{"success/20 of 21 (95.2%) ok", func(f *hlFix) {
			f.runs(20, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunFailed, time.Minute, time.Second)
		}, queue.HealthOK, nil},
		{"success/19 of 20 (exactly 95%) degraded", func(f *hlFix) {
			f.runs(19, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunFailed, time.Minute, time.Second)
		}, queue.HealthDegraded, func(t *testing.T, h *queue.Health) {
			if hlRate(h) != "0.950000" {
				t.Errorf("success_rate = %s, want 0.95", hlRate(h))
			}
		}},
		{"success/timeout counts as a failure", func(f *hlFix) {
			f.runs(19, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunTimeout, time.Minute, time.Second)
		}, queue.HealthDegraded, nil},
		{"success/cancelled runs are not counted", func(f *hlFix) {
			f.runs(20, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunFailed, time.Minute, time.Second)
			f.runs(30, queue.RunCancelled, time.Minute, time.Second)
		}, queue.HealthOK, nil},
		{"success/4 of 5 (exactly 80%) degraded", func(f *hlFix) {
			f.runs(4, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunFailed, time.Minute, time.Second)
		}, queue.HealthDegraded, nil},
		{"success/79 of 100 unhealthy", func(f *hlFix) {
			f.runs(79, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(21, queue.RunFailed, time.Minute, time.Second)
		}, queue.HealthUnhealthy, nil},
		{"success/3 of 4 (75%) unhealthy", func(f *hlFix) {
			f.runs(3, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(1, queue.RunFailed, time.Minute, time.Second)
		}, queue.HealthUnhealthy, nil},
		{"success/runs older than 24h are not counted", func(f *hlFix) {
			f.runs(1, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(10, queue.RunFailed, day+time.Millisecond, time.Second)
			f.runs(10, queue.RunTimeout, 30*day, time.Second)
		}, queue.HealthOK, func(t *testing.T, h *queue.Health) {
			if hlRate(h) != "1.000000" || h.Failed24h != 0 {
				t.Errorf("success_rate %s, failed_24h %d; want 1, 0", hlRate(h), h.Failed24h)
			}
		}},

		// backlog (todo in queues not paused): < 10 ok, 10–50 degraded, > 50 unhealthy.
		{"backlog/9 ok", func(f *hlFix) { f.tasks(9, queue.TaskTodo, "default", "") }, queue.HealthOK, nil},
		{"backlog/10 degraded", func(f *hlFix) { f.tasks(10, queue.TaskTodo, "default", "") }, queue.HealthDegraded, nil},
		{"backlog/50 degraded", func(f *hlFix) { f.tasks(50, queue.TaskTodo, "default", "") }, queue.HealthDegraded, nil},
		{"backlog/51 unhealthy", func(f *hlFix) { f.tasks(51, queue.TaskTodo, "default", "") }, queue.HealthUnhealthy, nil},
		{"backlog/summed over queues", func(f *hlFix) {
			f.queue("b", false)
			f.tasks(5, queue.TaskTodo, "default", "")
			f.tasks(5, queue.TaskTodo, "b", "")
		}, queue.HealthDegraded, nil},
		{"backlog/paused queues not counted", func(f *hlFix) {
			f.queue("stopped", true)
			f.tasks(60, queue.TaskTodo, "stopped", "")
			f.tasks(9, queue.TaskTodo, "default", "")
		}, queue.HealthOK, func(t *testing.T, h *queue.Health) {
			if h.Backlog != 9 {
				t.Errorf("backlog = %d, want 9", h.Backlog)
			}
			if q := h.Queues["stopped"]; q.Backlog != 60 || !q.Paused {
				t.Errorf("queues.stopped = %+v, want backlog 60, paused", q)
			}
		}},
		{"backlog/other states not counted", func(f *hlFix) {
			f.tasks(20, queue.TaskBlocked, "default", queue.BlockedHold)
			f.tasks(20, queue.TaskInbox, "default", "")
			f.tasks(20, queue.TaskDone, "default", "")
			f.tasks(9, queue.TaskTodo, "default", "")
		}, queue.HealthOK, nil},

		// blocked for retry: < 3 ok, 3–10 degraded, > 10 unhealthy.
		{"blocked_retry/2 ok", func(f *hlFix) { f.tasks(2, queue.TaskBlocked, "default", queue.BlockedRetry) }, queue.HealthOK, nil},
		{"blocked_retry/3 degraded", func(f *hlFix) { f.tasks(3, queue.TaskBlocked, "default", queue.BlockedRetry) }, queue.HealthDegraded, nil},
		{"blocked_retry/10 degraded", func(f *hlFix) { f.tasks(10, queue.TaskBlocked, "default", queue.BlockedRetry) }, queue.HealthDegraded, nil},
		{"blocked_retry/11 unhealthy", func(f *hlFix) { f.tasks(11, queue.TaskBlocked, "default", queue.BlockedRetry) }, queue.HealthUnhealthy, nil},
		{"blocked_retry/other reasons not counted", func(f *hlFix) {
			f.tasks(11, queue.TaskBlocked, "default", queue.BlockedHold)
			f.tasks(11, queue.TaskBlocked, "default", queue.BlockedScheduled)
			f.tasks(11, queue.TaskBlocked, "default", queue.BlockedDependency)
			f.tasks(2, queue.TaskBlocked, "default", queue.BlockedRetry)
		}, queue.HealthOK, func(t *testing.T, h *queue.Health) {
			if h.BlockedRetry != 2 {
				t.Errorf("blocked_retry = %d, want 2", h.BlockedRetry)
			}
		}},

		// failed_24h (runs ended failed or timeout): < 5 ok, >= 5 degraded.
		// 100 successes keep the success rate above 95 %.
		{"failed_24h/4 ok", func(f *hlFix) {
			f.runs(100, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(2, queue.RunFailed, time.Minute, time.Second)
			f.runs(2, queue.RunTimeout, time.Minute, time.Second)
		}, queue.HealthOK, nil},
		{"failed_24h/5 degraded", func(f *hlFix) {
			f.runs(100, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(2, queue.RunFailed, time.Minute, time.Second)
			f.runs(3, queue.RunTimeout, time.Minute, time.Second)
		}, queue.HealthDegraded, nil},
		{"failed_24h/older runs not counted", func(f *hlFix) {
			f.runs(100, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(4, queue.RunFailed, 23*time.Hour, time.Second)
			f.runs(5, queue.RunFailed, day+time.Minute, time.Second)
			f.runs(5, queue.RunTimeout, 3*day, time.Second)
		}, queue.HealthOK, func(t *testing.T, h *queue.Health) {
			if h.Failed24h != 4 {
				t.Errorf("failed_24h = %d, want 4", h.Failed24h)
			}
		}},
		{"failed_24h/cancelled runs not counted", func(f *hlFix) {
			f.runs(100, queue.RunSucceeded, time.Minute, time.Second)
			f.runs(4, queue.RunFailed, time.Minute, time.Second)
			f.runs(10, queue.RunCancelled, time.Minute, time.Second)
		}, queue.HealthOK, nil},

		// last heartbeat age: < 5 min ok, older or never unhealthy.
		{"heartbeat/just under 5m ok", func(f *hlFix) { f.heartbeat(5*time.Minute - time.Millisecond) }, queue.HealthOK, nil},
		{"heartbeat/exactly 5m unhealthy", func(f *hlFix) { f.heartbeat(5 * time.Minute) }, queue.HealthUnhealthy, nil},
		{"heartbeat/an hour unhealthy", func(f *hlFix) { f.heartbeat(time.Hour) }, queue.HealthUnhealthy, nil},
		{"heartbeat/never unhealthy", func(f *hlFix) { f.e.exec(`DELETE FROM system_state`) }, queue.HealthUnhealthy,
			func(t *testing.T, h *queue.Health) {
				if h.LastHeartbeat != nil {
					t.Errorf("last_heartbeat = %s, want null", *h.LastHeartbeat)
				}
			}},

		// The worst row decides.
		{"worst/two degraded rows stay degraded", func(f *hlFix) {
			f.tasks(10, queue.TaskTodo, "default", "")
			f.tasks(3, queue.TaskBlocked, "default", queue.BlockedRetry)
		}, queue.HealthDegraded, nil},
		{"worst/degraded and unhealthy", func(f *hlFix) {
			f.tasks(10, queue.TaskTodo, "default", "")
			f.heartbeat(time.Hour)
		}, queue.HealthUnhealthy, nil},
		{"worst/unhealthy then degraded", func(f *hlFix) {
			f.tasks(51, queue.TaskTodo, "default", "")
			f.tasks(3, queue.TaskBlocked, "default", queue.BlockedRetry)
		}, queue.HealthUnhealthy, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := hlSetup(t)
			c.setup(f)
			h := f.health(queue.DefaultThresholds())
			if h.Status != c.want {
				t.Errorf("status %s, want %s (success_rate %s, backlog %d, blocked_retry %d, failed_24h %d, warnings %q)",
					h.Status, c.want, hlRate(h), h.Backlog, h.BlockedRetry, h.Failed24h, h.Warnings)
			}
			if c.want != queue.HealthOK && len(h.Warnings) == 0 {
				t.Errorf("status %s without a warning saying why", h.Status)
			}
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}

// TestHealthThresholdsAreParameters: each threshold moves its boundary
// (cq health's flags set these fields).
func TestHealthThresholdsAreParameters(t *testing.T) {
	f := hlSetup(t)
	f.runs(9, queue.RunSucceeded, time.Minute, time.Second)
	f.runs(1, queue.RunFailed, time.Minute, time.Second) // 90 %, 1 failure
	f.tasks(4, queue.TaskTodo, "default", "")
	f.tasks(2, queue.TaskBlocked, "default", queue.BlockedRetry)
	f.heartbeat(2 * time.Minute)
	base := queue.DefaultThresholds()
	base.SuccessDegraded, base.SuccessUnhealthy = 0.85, 0.5 // 90 %: ok
	if h := f.health(base); h.Status != queue.HealthOK {
		t.Fatalf("baseline: %s %q, want ok", h.Status, h.Warnings)
	}
	cases := []struct {
		name string
		mod  func(th *queue.Thresholds)
		want string
	}{
		{"success degraded at 90%", func(th *queue.Thresholds) { th.SuccessDegraded = 0.90 }, queue.HealthDegraded},
		{"success unhealthy below 91%", func(th *queue.Thresholds) { th.SuccessDegraded, th.SuccessUnhealthy = 0.95, 0.91 }, queue.HealthUnhealthy},
		{"success unhealthy at 90% is not below", func(th *queue.Thresholds) { th.SuccessDegraded, th.SuccessUnhealthy = 0.95, 0.90 }, queue.HealthDegraded},
		{"backlog degraded at 4", func(th *queue.Thresholds) { th.BacklogDegraded = 4 }, queue.HealthDegraded},
		{"backlog degraded at 5", func(th *queue.Thresholds) { th.BacklogDegraded = 5 }, queue.HealthOK},
		{"backlog unhealthy above 3", func(th *queue.Thresholds) { th.BacklogDegraded, th.BacklogUnhealthy = 2, 3 }, queue.HealthUnhealthy},
		{"backlog unhealthy above 4", func(th *queue.Thresholds) { th.BacklogDegraded, th.BacklogUnhealthy = 2, 4 }, queue.HealthDegraded},
		{"blocked degraded at 2", func(th *queue.Thresholds) { th.BlockedDegraded = 2 }, queue.HealthDegraded},
		{"blocked unhealthy above 1", func(th *queue.Thresholds) { th.BlockedDegraded, th.BlockedUnhealthy = 1, 1 }, queue.HealthUnhealthy},
		{"blocked unhealthy above 2", func(th *queue.Thresholds) { th.BlockedDegraded, th.BlockedUnhealthy = 1, 2 }, queue.HealthDegraded},
		{"failed degraded at 1", func(th *queue.Thresholds) { th.FailedDegraded = 1 }, queue.HealthDegraded},
		{"failed degraded at 2", func(th *queue.Thresholds) { th.FailedDegraded = 2 }, queue.HealthOK},
		{"heartbeat max age 2m", func(th *queue.Thresholds) { th.HeartbeatMaxAge = 2 * time.Minute }, queue.HealthUnhealthy},
		{"heartbeat max age 2m1ms", func(th *queue.Thresholds) { th.HeartbeatMaxAge = 2*time.Minute + time.Millisecond }, queue.HealthOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := base
			c.mod(&th)
			if h := f.health(th); h.Status != c.want {
				t.Errorf("status %s %q, want %s", h.Status, h.Warnings, c.want)
			}
		})
	}
	t.Run("window", func(t *testing.T) {
		g := hlSetup(t)
		g.runs(10, queue.RunSucceeded, time.Minute, time.Second)
		g.runs(10, queue.RunFailed, 2*time.Hour, time.Second)
		th := queue.DefaultThresholds()
		if h := g.health(th); h.Status != queue.HealthUnhealthy || h.Failed24h != 10 {
			t.Errorf("24h window: %s, failed_24h %d; want unhealthy, 10", h.Status, h.Failed24h)
		}
		th.Window = time.Hour
		if h := g.health(th); h.Status != queue.HealthOK || h.Failed24h != 0 || hlRate(h) != "1.000000" {
			t.Errorf("1h window: %s, failed_24h %d, rate %s; want ok, 0, 1", h.Status, h.Failed24h, hlRate(h))
		}
	})
}

// TestHealthFigures: states, per-queue lines, run figures, average
// duration, the oldest waiting task and the wait warnings.
func TestHealthFigures(t *testing.T) {
	f := hlSetup(t)
	f.queue("slow", true)
	two := 2
	if err := f.e.st.SetQueue(f.e.ctx, "slow", queue.QueueSettings{Concurrency: &two}); err != nil {
		t.Fatal(err)
	}
	f.tasks(3, queue.TaskTodo, "default", "")
	f.e.clk.Add(time.Minute)
	f.tasks(2, queue.TaskTodo, "slow", "")
	f.tasks(1, queue.TaskBlocked, "default", queue.BlockedRetry)
	f.tasks(2, queue.TaskInbox, "default", "")
	f.tasks(4, queue.TaskFailed, "default", "")
	f.live(1, queue.RunRunning, "default")
	f.live(1, queue.RunQueued, "slow")
	f.live(1, queue.RunCancelling, "slow")
	f.runs(3, queue.RunSucceeded, time.Minute, 10*time.Second)
	f.runs(1, queue.RunFailed, time.Minute, 30*time.Second)
	f.runs(1, queue.RunCancelled, time.Minute, 50*time.Second)
	f.runs(5, queue.RunSucceeded, 2*24*time.Hour, time.Hour) // outside the window
	f.heartbeat(time.Second)
	f.e.exec(`UPDATE tasks SET warned = 1, todo_at = ? WHERE id = 't00001'`, f.ago(2*time.Minute))

	h := f.health(queue.DefaultThresholds())
	wantStates := map[string]int{"inbox": 2, "todo": 5, "blocked": 1, "doing": 3, "done": 1, "failed": 4, "cancelled": 0}
	for s, n := range wantStates {
		if h.States[s] != n {
			t.Errorf("states[%s] = %d, want %d", s, h.States[s], n)
		}
	}
	if len(h.States) != len(queue.TaskStates) {
		t.Errorf("states %v: want every task state", h.States)
	}
	if h.Backlog != 3 {
		t.Errorf("backlog %d, want 3 (slow is paused)", h.Backlog)
	}
	wantQ := map[string]queue.QueueHealth{
		"default": {Backlog: 3, Running: 1},
		"slow":    {Backlog: 2, Running: 2, Paused: true, Concurrency: 2},
		"runs":    {},
	}
	for name, q := range wantQ {
		if h.Queues[name] != q {
			t.Errorf("queues[%s] = %+v, want %+v", name, h.Queues[name], q)
		}
	}
	if h.BlockedRetry != 1 || h.Failed24h != 1 {
		t.Errorf("blocked_retry %d, failed_24h %d; want 1, 1", h.BlockedRetry, h.Failed24h)
	}
	if hlRate(h) != "0.750000" {
		t.Errorf("success_rate %s, want 0.75", hlRate(h))
	}
	// (3·10 + 30 + 50) / 5 runs that ended in the window.
	if h.AvgDurationSeconds == nil || math.Abs(*h.AvgDurationSeconds-22) > 0.01 {
		t.Errorf("avg_duration_seconds = %v, want 22", h.AvgDurationSeconds)
	}
	if got := h.RunsFinished; got[queue.RunSucceeded] != 3 || got[queue.RunFailed] != 1 || got[queue.RunCancelled] != 1 || got[queue.RunTimeout] != 0 {
		t.Errorf("runs_finished %v", got)
	}
	if h.LastHeartbeat == nil || *h.LastHeartbeat != f.ago(time.Second) {
		t.Errorf("last_heartbeat %v, want %s", h.LastHeartbeat, f.ago(time.Second))
	}
	if h.OldestWaiting == nil || h.OldestWaiting.ID != "t00001" || h.OldestWaiting.Seconds != 120 {
		t.Errorf("oldest_waiting %+v, want t00001 waiting 120s", h.OldestWaiting)
	}
	found := false
	for _, w := range h.Warnings {
		if strings.Contains(w, "waiting") {
			found = true
		}
	}
	if !found {
		t.Errorf("warnings %q: want the wait warning", h.Warnings)
	}
}

// TestHealthFiguresAgree: while batches are committed, every cq health
// reads one snapshot: the todo count is the queues' backlogs summed, and
// the backlog is that of the queues not paused.
func TestHealthFiguresAgree(t *testing.T) {
	e := mntSetup(t)
	paused := true
	if err := e.st.SetQueue(e.ctx, "pz", queue.QueueSettings{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.add(queue.Spec{Queue: "pz"})
	}
	batch := make([]queue.Spec, 50)
	for i := range batch {
		n, err := queue.Spec{Cmd: []string{"true"}}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = n
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	var batches atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := e.st.Create(e.ctx, batch, queue.CreateOptions{Enqueue: true}); err != nil {
				done <- err
				return
			}
			batches.Add(1)
		}
	}()
	bad, reads := 0, 0
	var first string
	// Reads go on until 50 batches were committed among them.
	for ; reads < 100 || batches.Load() < 50; reads++ {
		h, err := e.st.Health(e.ctx, queue.DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		all, unpaused := 0, 0
		for _, q := range h.Queues {
			all += q.Backlog
			if !q.Paused {
				unpaused += q.Backlog
			}
		}
		if h.States[queue.TaskTodo] != all || h.Backlog != unpaused {
			if bad == 0 {
				first = fmt.Sprintf("todo %d, queues' backlogs %d; backlog %d, unpaused queues' %d", h.States[queue.TaskTodo], all, h.Backlog, unpaused)
			}
			bad++
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d of %d health reads disagreed with themselves; first: %s", bad, reads, first)
	}
}
