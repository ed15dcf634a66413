package maintenance_test

// The maintenance pass and cleanup (docs/operations.md) over a real store with
// an injected clock (Store.Now): leases expire, start timeouts and
// backoffs come due, tasks wait too long, all by moving the clock, never
// by waiting.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

var hbT0 = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)

type hbEnv struct {
	t    *testing.T
	st   *queue.Store
	clk  *clock.Fake
	ctx  context.Context
	home string
	path string
}

func hbSetup(t *testing.T) *hbEnv {
	t.Helper()
	home := t.TempDir()
	d := storetest.OpenSQLite(t, home)
	path := d.Path
	clk := clock.NewFake(hbT0)
	st := queue.New(d.Store())
	st.Now = clk.Now
	st.Boot = clock.Following(clk.Now)
	return &hbEnv{t: t, st: st, clk: clk, ctx: context.Background(), home: home, path: path}
}

func (e *hbEnv) add(sp queue.Spec) string {
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

func (e *hbEnv) setQueue(name string, s queue.QueueSettings) {
	e.t.Helper()
	if err := e.st.SetQueue(e.ctx, name, s); err != nil {
		e.t.Fatal(err)
	}
}

func (e *hbEnv) claim(q, want string, lease time.Duration) *queue.Claimed {
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

func (e *hbEnv) start(c *queue.Claimed, pid int) {
	e.t.Helper()
	if err := e.st.StartRun(e.ctx, c.RunID, c.Token, pid, pid); err != nil {
		e.t.Fatal(err)
	}
}

func (e *hbEnv) finish(c *queue.Claimed, state string, code int) string {
	e.t.Helper()
	ts, err := e.st.FinishRun(e.ctx, c.RunID, c.Token, queue.Outcome{State: state, ExitCode: &code})
	if err != nil {
		e.t.Fatal(err)
	}
	return ts
}

func (e *hbEnv) pass(opt maintenance.Options) maintenance.Result {
	e.t.Helper()
	r, err := maintenance.Pass(e.ctx, e.st, opt)
	if err != nil {
		e.t.Fatalf("pass: %v", err)
	}
	return r
}

func (e *hbEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := sqlite.DBOf(e.st.Backend()).SQL.ExecContext(e.ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *hbEnv) row(q string, args ...any) string {
	e.t.Helper()
	rows, err := sqlite.DBOf(e.st.Backend()).SQL.QueryContext(e.ctx, q, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return "<no row>"
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		e.t.Fatal(err)
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case nil:
			parts[i] = "NULL"
		case []byte:
			parts[i] = string(x)
		default:
			parts[i] = fmt.Sprint(x)
		}
	}
	return strings.Join(parts, " ")
}

func (e *hbEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRowContext(e.ctx, q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *hbEnv) state(id string) string {
	e.t.Helper()
	tk, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return tk.State
}

func (e *hbEnv) runState(id string) string {
	e.t.Helper()
	s, err := e.st.RunState(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// checkEvents checks every task's event log: each event that changes a
// state starts where the previous one ended and is allowed by the state
// machine (docs/semantics.md), and each run has at most one terminal
// event.
func (e *hbEnv) checkEvents() {
	e.t.Helper()
	evs, err := e.st.Events(e.ctx, 0, 1<<30)
	if err != nil {
		e.t.Fatal(err)
	}
	hbCheckEvents(e.t, evs)
}

func hbStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func hbCheckEvents(t interface {
	Helper()
	Errorf(string, ...any)
}, evs []queue.Event) {
	t.Helper()
	taskAt := map[string]string{}
	runAt := map[string]string{}
	for _, ev := range evs {
		from, to, task, run := hbStr(ev.From), hbStr(ev.To), hbStr(ev.TaskID), hbStr(ev.RunID)
		switch {
		case strings.HasPrefix(ev.Kind, "run."):
			cur, seen := runAt[run]
			switch {
			case !seen && (from != "" || to != queue.RunQueued):
				t.Errorf("event %d %s: run %s starts %q → %q, want → queued", ev.Seq, ev.Kind, run, from, to)
			case seen && from != cur:
				t.Errorf("event %d %s: run %s from %q, but it was %q", ev.Seq, ev.Kind, run, from, cur)
			case seen && !queue.RunTransitionAllowed(from, to):
				t.Errorf("event %d %s: run %s %s → %s is not allowed", ev.Seq, ev.Kind, run, from, to)
			}
			runAt[run] = to
		case strings.HasPrefix(ev.Kind, "task."):
			cur, seen := taskAt[task]
			switch {
			case !seen && (ev.Kind != "task.created" || to != queue.TaskInbox):
				t.Errorf("event %d %s: task %s first event is not its creation", ev.Seq, ev.Kind, task)
			case seen && from != cur:
				t.Errorf("event %d %s: task %s from %q, but it was %q", ev.Seq, ev.Kind, task, from, cur)
			case seen && from != to && !queue.TaskTransitionAllowed(from, to):
				t.Errorf("event %d %s: task %s %s → %s is not allowed", ev.Seq, ev.Kind, task, from, to)
			}
			taskAt[task] = to
		}
	}
}

// TestPassReapsExpiredLeases: the maintenance pass's reaper, for each live run
// state, at the lease's expiry.
func TestPassReapsExpiredLeases(t *testing.T) {
	const lease = 90 * time.Second
	t.Run("running becomes failed lease_expired, transient retry", func(t *testing.T) {
		e := hbSetup(t)
		id := e.add(queue.Spec{ID: "r", Queue: "q"})
		c := e.claim("q", id, lease)
		e.start(c, 0)
		e.clk.Add(lease - time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Reaped != 0 || e.runState(c.RunID) != queue.RunRunning {
			t.Fatalf("before expiry: reaped %d, run %s", r.Reaped, e.runState(c.RunID))
		}
		e.clk.Add(2 * time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Reaped != 1 {
			t.Fatalf("after expiry: reaped %d, want 1", r.Reaped)
		}
		if got := e.row(`SELECT state, reason FROM runs WHERE id = ?`, c.RunID); got != "failed lease_expired" {
			t.Errorf("run: %s, want failed lease_expired", got)
		}
		want := "blocked retry 1 0 0 " + queue.FormatTime(e.clk.Now().Add(30*time.Second))
		if got := e.row(`SELECT state, blocked_reason, fails_transient, fails_timeout, fails_other, not_before FROM tasks WHERE id = 'r'`); got != want {
			t.Errorf("task: %s, want %s (transient class: first backoff 30s)", got, want)
		}
		if got := e.row(`SELECT from_state, to_state, reason FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1`, c.RunID); got != "running failed lease_expired" {
			t.Errorf("last run event: %s", got)
		}
		if r := e.pass(maintenance.Options{}); r.Reaped != 0 {
			t.Errorf("second pass reaped %d", r.Reaped)
		}
		// The lost worker's late report is refused: nothing changes.
		if _, err := e.st.FinishRun(e.ctx, c.RunID, c.Token, queue.Outcome{State: queue.RunSucceeded}); err == nil {
			t.Error("a reaped run accepted its worker's late success")
		}
		e.checkEvents()
	})
	t.Run("running with no transient budget left fails the task", func(t *testing.T) {
		e := hbSetup(t)
		zero := 0
		e.setQueue("q", queue.QueueSettings{TransientRetries: &zero})
		id := e.add(queue.Spec{ID: "r", Queue: "q"})
		c := e.claim("q", id, lease)
		e.start(c, 0)
		e.clk.Add(lease + time.Millisecond)
		e.pass(maintenance.Options{})
		if got := e.row(`SELECT t.state, r.state FROM tasks t JOIN runs r ON r.task_id = t.id WHERE t.id = 'r'`); got != "failed failed" {
			t.Errorf("task and run: %s, want failed failed", got)
		}
		e.checkEvents()
	})
	t.Run("cancelling becomes cancelled", func(t *testing.T) {
		e := hbSetup(t)
		id := e.add(queue.Spec{ID: "c", Queue: "q"})
		c := e.claim("q", id, lease)
		e.start(c, 0)
		if _, _, err := e.st.Cancel(e.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		if s := e.runState(c.RunID); s != queue.RunCancelling {
			t.Fatalf("setup: run %s", s)
		}
		e.clk.Add(lease + time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Reaped != 1 {
			t.Fatalf("reaped %d, want 1", r.Reaped)
		}
		if got := e.row(`SELECT t.state, r.state, r.reason FROM tasks t JOIN runs r ON r.task_id = t.id WHERE t.id = 'c'`); got != "cancelled cancelled lease_expired" {
			t.Errorf("task and run: %s, want cancelled cancelled lease_expired", got)
		}
		e.checkEvents()
	})
	t.Run("queued becomes failed", func(t *testing.T) {
		e := hbSetup(t)
		id := e.add(queue.Spec{ID: "q1", Queue: "q"})
		c := e.claim("q", id, lease)
		e.clk.Add(lease + time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Reaped != 1 || r.StartTimeout != 0 {
			t.Fatalf("reaped %d, start timeouts %d; want 1, 0", r.Reaped, r.StartTimeout)
		}
		if got := e.row(`SELECT state, reason FROM runs WHERE id = ?`, c.RunID); got != "failed lease_expired" {
			t.Errorf("run: %s, want failed lease_expired", got)
		}
		if got := e.row(`SELECT state, blocked_reason, fails_transient FROM tasks WHERE id = 'q1'`); got != "blocked retry 1" {
			t.Errorf("task: %s, want blocked retry 1", got)
		}
		if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err == nil {
			t.Error("a reaped queued run could still start")
		}
		e.checkEvents()
	})
	t.Run("renewed lease is not reaped", func(t *testing.T) {
		e := hbSetup(t)
		id := e.add(queue.Spec{ID: "r", Queue: "q"})
		c := e.claim("q", id, lease)
		e.start(c, 0)
		e.clk.Add(lease / 3 * 2)
		if _, err := e.st.RenewLease(e.ctx, c.RunID, c.Token, lease); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(lease - time.Millisecond) // past the first expiry, before the renewed one
		if r := e.pass(maintenance.Options{}); r.Reaped != 0 || e.runState(c.RunID) != queue.RunRunning {
			t.Errorf("renewed run reaped: %d, run %s", r.Reaped, e.runState(c.RunID))
		}
	})
	t.Run("completed run is never reaped", func(t *testing.T) {
		e := hbSetup(t)
		id := e.add(queue.Spec{ID: "r", Queue: "q"})
		c := e.claim("q", id, lease)
		e.start(c, 0)
		e.clk.Add(lease - time.Second)
		e.finish(c, queue.RunSucceeded, 0)
		n := e.count(`SELECT COUNT(*) FROM events`)
		e.clk.Add(time.Hour)
		if r := e.pass(maintenance.Options{}); r.Reaped != 0 {
			t.Errorf("reaped %d", r.Reaped)
		}
		if got := e.row(`SELECT t.state, r.state FROM tasks t JOIN runs r ON r.task_id = t.id`); got != "done succeeded" {
			t.Errorf("task and run: %s", got)
		}
		if m := e.count(`SELECT COUNT(*) FROM events`); m != n {
			t.Errorf("the pass wrote %d events", m-n)
		}
	})
}

// hbSleeper starts `sleep 60` in a process group of its own, with
// CQ_RUN_ID=runID in its environment if runID is set. It returns the
// command and a channel closed when it has exited.
func hbSleeper(t *testing.T, runID string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = os.Environ()
	if runID != "" {
		cmd.Env = append(cmd.Env, "CQ_RUN_ID="+runID)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return cmd, done
}

// TestPassKillsLostRunGroupOnThisHost: a reaped run recorded on this host
// has its process group killed, but only if the group still belongs to
// that run (CQ_RUN_ID in a member's environment) and only on its host.
func TestPassKillsLostRunGroupOnThisHost(t *testing.T) {
	e := hbSetup(t)
	mk := func(id string) *queue.Claimed {
		e.add(queue.Spec{ID: id, Queue: id})
		return e.claim(id, id, time.Minute)
	}
	mine, stranger, elsewhere := mk("mine"), mk("stranger"), mk("elsewhere")
	p1, done1 := hbSleeper(t, mine.RunID)
	p2, done2 := hbSleeper(t, "")              // not the run's process (a recycled pid)
	p3, done3 := hbSleeper(t, elsewhere.RunID) // its run is on another host
	e.start(mine, p1.Process.Pid)
	e.start(stranger, p2.Process.Pid)
	e.start(elsewhere, p3.Process.Pid)
	e.exec(`UPDATE runs SET host = 'other-host' WHERE id = ?`, elsewhere.RunID)

	e.clk.Add(time.Minute + time.Millisecond)
	r := e.pass(maintenance.Options{Host: "h-test"})
	if r.Reaped != 3 || r.Killed != 1 {
		t.Errorf("reaped %d, killed %d; want 3, 1", r.Reaped, r.Killed)
	}
	select {
	case <-done1:
	case <-time.After(30 * time.Second):
		t.Error("the lost run's process group is still alive 30s after the pass")
	}
	for name, d := range map[string]chan struct{}{"stranger": done2, "elsewhere": done3} {
		select {
		case <-d:
			t.Errorf("%s's process was killed", name)
		default:
		}
	}
	// A group without the run's CQ_RUN_ID whose leader started outside
	// the run's claim-to-start window is not the run's: its pid was
	// recycled.
	hourAgo := time.Now().Add(-time.Hour)
	if maintenance.KillRunGroup(p2.Process.Pid, mine.RunID, hourAgo, hourAgo.Add(time.Minute)) {
		t.Error("KillRunGroup killed a group without the run's CQ_RUN_ID, its leader started after the run's window")
	}
	if maintenance.KillRunGroup(p2.Process.Pid, mine.RunID, time.Time{}, time.Time{}) {
		t.Error("KillRunGroup killed a group without the run's CQ_RUN_ID, the run's times unknown")
	}
	now := time.Now()
	if maintenance.KillRunGroup(1, mine.RunID, now.Add(-time.Hour), now) || maintenance.KillRunGroup(0, mine.RunID, now.Add(-time.Hour), now) {
		t.Error("KillRunGroup accepted pgid 0 or 1")
	}
}

// TestPassKillsALeaderThatClearedItsEnvironment: a lost run whose process
// cleared its environment (env -i, sudo) carries no CQ_RUN_ID, yet its
// group's leader is the process the worker started between the claim and
// the recorded start: the group is killed all the same (docs/semantics.md,
// Leases: the old process is gone before anyone else may take the task).
func TestPassKillsALeaderThatClearedItsEnvironment(t *testing.T) {
	e := hbSetup(t)
	e.add(queue.Spec{ID: "bare", Queue: "q"})
	claimedAt := time.Now()
	c := e.claim("q", "bare", time.Minute)
	leader, done := hbSleeper(t, "") // env -i: no CQ_RUN_ID
	e.start(c, leader.Process.Pid)
	// The store's clock is a fake one: give the run the real times of its
	// claim and start, as a worker's clock would have written them.
	e.exec(`UPDATE runs SET created_at = ?, started_at = ? WHERE id = ?`,
		queue.FormatTime(claimedAt), queue.FormatTime(time.Now()), c.RunID)

	e.clk.Add(time.Minute + time.Millisecond)
	r := e.pass(maintenance.Options{Host: "h-test"})
	if r.Reaped != 1 || r.Killed != 1 {
		t.Errorf("reaped %d, killed %d; want 1, 1", r.Reaped, r.Killed)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("the lost run's leader, without CQ_RUN_ID, is alive 30s after the pass")
	}
}

// TestPassKillsWhatLeftTheGroupToo: a lost run whose process group is
// still alive also loses the processes that left that group (setsid) but
// carry its CQ_RUN_ID: they would overlap the task's next run.
func TestPassKillsWhatLeftTheGroupToo(t *testing.T) {
	e := hbSetup(t)
	e.add(queue.Spec{ID: "lost", Queue: "q"})
	c := e.claim("q", "lost", time.Minute)
	leader, inGroup := hbSleeper(t, c.RunID)
	_, escaped := hbSleeper(t, c.RunID) // a group of its own, as after setsid
	e.start(c, leader.Process.Pid)
	e.clk.Add(time.Minute + time.Millisecond)
	if r := e.pass(maintenance.Options{Host: "h-test"}); r.Reaped != 1 || r.Killed != 1 {
		t.Errorf("reaped %d, killed %d; want 1, 1", r.Reaped, r.Killed)
	}
	for name, d := range map[string]chan struct{}{"the group": inGroup, "the process that left it": escaped} {
		select {
		case <-d:
		case <-time.After(30 * time.Second):
			t.Errorf("%s of the lost run is alive 30s after the pass", name)
		}
	}
}

// TestPassStartTimeout: a run queued longer than its queue's start
// timeout ends timeout (transient class), the task waits the transient
// backoff and the pass then promotes it.
func TestPassStartTimeout(t *testing.T) {
	e := hbSetup(t)
	st := 2 * time.Minute
	e.setQueue("q", queue.QueueSettings{StartTimeout: &st})
	id := e.add(queue.Spec{ID: "s", Queue: "q"})
	c := e.claim("q", id, time.Hour) // the lease outlives the start timeout
	e.clk.Add(st)
	if r := e.pass(maintenance.Options{}); r.StartTimeout != 0 || e.runState(c.RunID) != queue.RunQueued {
		t.Fatalf("at the start timeout: %d timed out, run %s", r.StartTimeout, e.runState(c.RunID))
	}
	e.clk.Add(time.Millisecond)
	if r := e.pass(maintenance.Options{}); r.StartTimeout != 1 {
		t.Fatalf("past the start timeout: %d timed out, want 1", r.StartTimeout)
	}
	if got := e.row(`SELECT state, reason FROM runs WHERE id = ?`, c.RunID); got != "timeout start_timeout" {
		t.Errorf("run: %s, want timeout start_timeout", got)
	}
	due := e.clk.Now().Add(30 * time.Second)
	if got := e.row(`SELECT state, blocked_reason, fails_transient, fails_timeout, not_before FROM tasks WHERE id = 's'`); got != "blocked retry 1 0 "+queue.FormatTime(due) {
		t.Errorf("task: %s, want blocked retry, one transient failure, due in 30s", got)
	}
	if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err == nil {
		t.Error("the worker could still start a timed-out run")
	}
	e.clk.Set(due.Add(-time.Millisecond))
	if r := e.pass(maintenance.Options{}); r.Promoted != 0 {
		t.Errorf("promoted %d before the backoff ended", r.Promoted)
	}
	e.clk.Set(due)
	if r := e.pass(maintenance.Options{}); r.Promoted != 1 || e.state("s") != queue.TaskTodo {
		t.Errorf("at the backoff's end: promoted %d, task %s", r.Promoted, e.state("s"))
	}
	c2 := e.claim("q", id, time.Hour)
	if c2.Attempt != 2 {
		t.Errorf("next attempt %d, want 2", c2.Attempt)
	}
	e.checkEvents()
}

// TestPassStartTimeoutKillsAStartedProcess: a worker that started a run's
// process and stalled before recording the start loses the run to the
// start timeout; the pass kills that process on its host (found by
// CQ_RUN_ID), so that the task's next run cannot overlap it, and leaves
// another host's alone.
func TestPassStartTimeoutKillsAStartedProcess(t *testing.T) {
	e := hbSetup(t)
	st := time.Minute
	e.setQueue("q", queue.QueueSettings{StartTimeout: &st})
	mine := e.claim("q", e.add(queue.Spec{ID: "mine", Queue: "q"}), time.Hour)
	other := e.claim("q", e.add(queue.Spec{ID: "other", Queue: "q"}), time.Hour)
	e.exec(`UPDATE runs SET host = 'other-host' WHERE id = ?`, other.RunID)
	_, done1 := hbSleeper(t, mine.RunID)
	_, done2 := hbSleeper(t, other.RunID)
	e.clk.Add(st + time.Millisecond)
	if r := e.pass(maintenance.Options{Host: "h-test"}); r.StartTimeout != 2 || r.Killed != 1 {
		t.Errorf("timed out %d, killed %d; want 2, 1", r.StartTimeout, r.Killed)
	}
	select {
	case <-done1:
	case <-time.After(30 * time.Second):
		t.Error("the timed-out run's process is still alive 30s after the pass")
	}
	select {
	case <-done2:
		t.Error("the process of a run on another host was killed")
	default:
	}
}

// TestPassPromotesDueTasks: a retry backoff and a schedule come due; the
// pass moves each task to todo exactly once, not a millisecond early.
func TestPassPromotesDueTasks(t *testing.T) {
	e := hbSetup(t)
	one := 1
	e.add(queue.Spec{ID: "flaky", Queue: "q", Retries: &one})
	e.add(queue.Spec{ID: "later", Delay: "1h"})
	e.add(queue.Spec{ID: "later-held", Delay: "1h", Hold: true})
	c := e.claim("q", "flaky", time.Hour)
	e.start(c, 0)
	if s := e.finish(c, queue.RunFailed, 1); s != queue.TaskBlocked {
		t.Fatalf("task %s after a failure with budget, want blocked", s)
	}
	tk, err := e.st.Get(e.ctx, "flaky")
	if err != nil || tk.NotBefore == nil {
		t.Fatalf("no not_before: %v", err)
	}
	due := queue.ParseStoredTime(*tk.NotBefore)
	if d := due.Sub(e.clk.Now()); d < 24*time.Second || d > 36*time.Second {
		t.Errorf("backoff %v, want 30s ± 20%%", d)
	}
	e.clk.Set(due.Add(-time.Millisecond))
	if r := e.pass(maintenance.Options{}); r.Promoted != 0 || e.state("flaky") != queue.TaskBlocked {
		t.Fatalf("promoted %d a millisecond early", r.Promoted)
	}
	e.clk.Set(due)
	if r := e.pass(maintenance.Options{}); r.Promoted != 1 || e.state("flaky") != queue.TaskTodo {
		t.Fatalf("at due time: promoted %d, task %s", r.Promoted, e.state("flaky"))
	}
	e.clk.Set(hbT0.Add(time.Hour))
	if r := e.pass(maintenance.Options{}); r.Promoted != 1 {
		t.Errorf("schedule due: promoted %d, want 1 (the held one stays)", r.Promoted)
	}
	for id, s := range map[string]string{"flaky": "todo", "later": "todo", "later-held": "blocked"} {
		if got := e.state(id); got != s {
			t.Errorf("%s is %s, want %s", id, got, s)
		}
	}
	n := e.count(`SELECT COUNT(*) FROM events`)
	if r := e.pass(maintenance.Options{}); r.Promoted != 0 {
		t.Errorf("third pass promoted %d", r.Promoted)
	}
	if got := e.count(`SELECT COUNT(*) FROM events`); got != n {
		t.Errorf("third pass wrote %d events", got-n)
	}
	if got := e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'flaky' AND from_state = 'blocked' AND to_state = 'todo'`); got != 1 {
		t.Errorf("flaky promoted %d times, want once", got)
	}
	e.checkEvents()
}

// TestPassSafetyNets: states the event-driven paths should never leave
// (made with SQL) are repaired by the next pass.
func TestPassSafetyNets(t *testing.T) {
	t.Run("blocked with nothing blocking goes to todo", func(t *testing.T) {
		e := hbSetup(t)
		e.add(queue.Spec{ID: "stuck", Hold: true})
		e.add(queue.Spec{ID: "held", Hold: true})
		// Hold lost, still blocked; marked warned by an earlier wait.
		e.exec(`UPDATE tasks SET hold = 0, warned = 1 WHERE id = 'stuck'`)
		r := e.pass(maintenance.Options{})
		if r.Promoted != 1 || e.state("stuck") != queue.TaskTodo || e.state("held") != queue.TaskBlocked {
			t.Errorf("promoted %d; stuck %s, held %s", r.Promoted, e.state("stuck"), e.state("held"))
		}
		// A new entry into todo: a new wait warning when it waits too long.
		e.clk.Add(10*time.Minute + time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Warned != 1 {
			t.Errorf("warned %d after the repaired task waited, want 1", r.Warned)
		}
		e.checkEvents()
	})
	t.Run("dependent of a failed task is cancelled", func(t *testing.T) {
		e := hbSetup(t)
		e.add(queue.Spec{ID: "a", Queue: "x"})
		e.add(queue.Spec{ID: "b", After: []string{"a"}})
		e.add(queue.Spec{ID: "c", After: []string{"b"}})
		e.add(queue.Spec{ID: "d", Queue: "x"})
		e.add(queue.Spec{ID: "e", After: []string{"d"}})
		e.exec(`UPDATE tasks SET state = 'failed', lane_head = 0, finished_at = ? WHERE id = 'a'`, queue.FormatTime(e.clk.Now()))
		e.exec(`UPDATE tasks SET state = 'cancelled', lane_head = 0, finished_at = ? WHERE id = 'd'`, queue.FormatTime(e.clk.Now()))
		r := e.pass(maintenance.Options{})
		if r.Cancelled < 2 {
			t.Errorf("cancelled %d, want b and e at least", r.Cancelled)
		}
		for id, want := range map[string]string{"b": "dependency a failed", "c": "dependency b", "e": "dependency d cancelled"} {
			got := e.row(`SELECT state, reason FROM tasks WHERE id = ?`, id)
			if !strings.HasPrefix(got, "cancelled ") || !strings.Contains(got, want) {
				t.Errorf("%s: %s, want cancelled, %s", id, got, want)
			}
		}
	})
	t.Run("dependencies_all_done_but_counter_stale", func(t *testing.T) {
		// The pass promotes blocked tasks with nothing
		// left blocking them. Here the dependency ended done but its
		// dependent was never told (the state a lost event-driven
		// promotion leaves).
		e := hbSetup(t)
		e.add(queue.Spec{ID: "a", Queue: "x"})
		e.add(queue.Spec{ID: "b", After: []string{"a"}})
		e.exec(`UPDATE tasks SET state = 'done', lane_head = 0, finished_at = ? WHERE id = 'a'`, queue.FormatTime(e.clk.Now()))
		e.pass(maintenance.Options{})
		if got := e.row(`SELECT state, blocked_reason FROM tasks WHERE id = 'b'`); got != "todo NULL" {
			t.Errorf("b: %s, want todo (its only dependency is done)", got)
		}
	})
}

// TestPassWaitWarnings: one task.waiting event per entry into todo,
// never repeated by later passes, a new one after the task comes back to
// todo; the task is never cancelled or moved for it.
func TestPassWaitWarnings(t *testing.T) {
	e := hbSetup(t)
	one := 1
	e.add(queue.Spec{ID: "w", Queue: "q", Retries: &one})
	warns := func() int {
		return e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'w' AND kind = 'task.waiting'`)
	}
	wait := func(label string, want int) {
		t.Helper()
		e.clk.Add(10 * time.Minute)
		if r := e.pass(maintenance.Options{}); r.Warned != 0 {
			t.Errorf("%s: warned %d at exactly warn-after", label, r.Warned)
		}
		e.clk.Add(time.Millisecond)
		if r := e.pass(maintenance.Options{}); r.Warned != 1 {
			t.Errorf("%s: warned %d past warn-after, want 1", label, r.Warned)
		}
		for range 3 {
			e.clk.Add(time.Hour)
			if r := e.pass(maintenance.Options{}); r.Warned != 0 {
				t.Errorf("%s: warned again on a later pass", label)
			}
		}
		if got := warns(); got != want {
			t.Errorf("%s: %d task.waiting events, want %d", label, got, want)
		}
		if s := e.state("w"); s != queue.TaskTodo {
			t.Errorf("%s: task %s, want todo", label, s)
		}
		h, err := e.st.Health(e.ctx, queue.DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(h.Warnings, func(w string) bool { return strings.Contains(w, "waiting") }) {
			t.Errorf("%s: health warnings %q lack the wait warning", label, h.Warnings)
		}
	}
	wait("first wait", 1)

	// doing → todo: a worker released it at a graceful stop.
	c := e.claim("q", "w", time.Hour)
	e.start(c, 0)
	if _, err := e.st.ReleaseRun(e.ctx, c.RunID, c.Token); err != nil {
		t.Fatal(err)
	}
	wait("after a release", 2)

	// doing → blocked (retry) → todo by the pass.
	c = e.claim("q", "w", time.Hour)
	e.start(c, 0)
	if s := e.finish(c, queue.RunFailed, 1); s != queue.TaskBlocked {
		t.Fatalf("task %s", s)
	}
	e.clk.Add(2 * time.Minute)
	if r := e.pass(maintenance.Options{}); r.Promoted != 1 {
		t.Fatalf("promoted %d", r.Promoted)
	}
	wait("after a retry backoff", 3)

	// todo → blocked (hold) → todo (release).
	if _, _, err := e.st.Hold(e.ctx, "w", ""); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Hour) // held time does not count
	if _, _, err := e.st.Release(e.ctx, "w", ""); err != nil {
		t.Fatal(err)
	}
	wait("after hold and release", 4)
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id = 'w' AND kind LIKE 'task.%' AND to_state = 'cancelled'`); n != 0 {
		t.Error("the waiting task was cancelled")
	}
	e.checkEvents()
}

// TestPassSystemState: last_heartbeat, queue_length (the backlog of
// queues not paused) and health are recorded in system_state.
func TestPassSystemState(t *testing.T) {
	e := hbSetup(t)
	paused := true
	e.setQueue("stopped", queue.QueueSettings{Paused: &paused})
	for i := range 3 {
		e.add(queue.Spec{ID: fmt.Sprintf("a%d", i)})
	}
	for i := range 20 {
		e.add(queue.Spec{ID: fmt.Sprintf("p%d", i), Queue: "stopped"})
	}
	get := func(k string) string {
		v, ok, err := e.st.SystemState(e.ctx, k)
		if err != nil || !ok {
			t.Fatalf("system_state %s: %v %v", k, ok, err)
		}
		return v
	}
	r := e.pass(maintenance.Options{})
	if got := get("last_heartbeat"); got != queue.FormatTime(hbT0) {
		t.Errorf("last_heartbeat %s, want %s", got, queue.FormatTime(hbT0))
	}
	if got := get("queue_length"); got != "3" {
		t.Errorf("queue_length %s, want 3", got)
	}
	if got := get("health"); got != queue.HealthOK || r.Health != queue.HealthOK {
		t.Errorf("health %s (result %s), want ok", got, r.Health)
	}
	for i := range 8 {
		e.add(queue.Spec{ID: fmt.Sprintf("b%d", i)})
	}
	e.clk.Add(time.Minute)
	e.pass(maintenance.Options{})
	if got := get("last_heartbeat"); got != queue.FormatTime(hbT0.Add(time.Minute)) {
		t.Errorf("last_heartbeat %s, want a minute later", got)
	}
	if got := get("queue_length"); got != "11" {
		t.Errorf("queue_length %s, want 11", got)
	}
	if got := get("health"); got != queue.HealthDegraded {
		t.Errorf("health %s, want degraded (backlog 11)", got)
	}
	// Health computed afterwards sees the pass's heartbeat as fresh.
	h, err := e.st.Health(e.ctx, queue.DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != queue.HealthDegraded {
		t.Errorf("health %s %q", h.Status, h.Warnings)
	}
}

// TestPassesOverlap: passes from two connections at once (as cron's and a
// worker's) reap each expired run exactly once.
func TestPassesOverlap(t *testing.T) {
	e := hbSetup(t)
	var runs []string
	for i := range 20 {
		id := e.add(queue.Spec{ID: fmt.Sprintf("t%02d", i), Queue: "q"})
		c := e.claim("q", id, time.Minute)
		if i%2 == 0 {
			e.start(c, 0)
		}
		runs = append(runs, c.RunID)
	}
	e.clk.Add(time.Hour)
	d2, err := sqlite.Open(e.ctx, e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	st2 := queue.New(d2.Store())
	st2.Now = e.clk.Now
	st2.Boot = clock.Following(e.clk.Now)
	var wg sync.WaitGroup
	results := make([]maintenance.Result, 4)
	errs := make([]error, 4)
	for i := range results {
		st := e.st
		if i%2 == 1 {
			st = st2
		}
		wg.Go(func() { results[i], errs[i] = maintenance.Pass(e.ctx, st, maintenance.Options{}) })
	}
	wg.Wait()
	total := 0
	for i := range results {
		if errs[i] != nil {
			t.Errorf("pass %d: %v", i, errs[i])
		}
		total += results[i].Reaped
	}
	if total != len(runs) {
		t.Errorf("reaped %d in all, want %d", total, len(runs))
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE reason = 'lease_expired'`); n != len(runs) {
		t.Errorf("%d lease_expired events, want %d", n, len(runs))
	}
	e.checkEvents()
}

// TestCleanupRemovesRunFolders: maintenance.Cleanup deletes the expired
// tasks with their runs, events and run folders, and leaves every other
// folder.
func TestCleanupRemovesRunFolders(t *testing.T) {
	e := hbSetup(t)
	mkdir := func(run string) string {
		dir := filepath.Join(e.home, "runs", run)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("out\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	runTask := func(id string, outcome string) string {
		e.add(queue.Spec{ID: id, Queue: "q"})
		c := e.claim("q", id, time.Hour)
		e.start(c, 0)
		code := 0
		if outcome != queue.RunSucceeded {
			code = 1
		}
		e.finish(c, outcome, code)
		mkdir(c.RunID)
		return c.RunID
	}
	var oldDirs []string
	for i := range 7 {
		oldDirs = append(oldDirs, filepath.Join(e.home, "runs", runTask(fmt.Sprintf("old%d", i), queue.RunSucceeded)))
	}
	failedDir := filepath.Join(e.home, "runs", runTask("failed-recent", queue.RunFailed))
	e.add(queue.Spec{ID: "cancelled-old", Queue: "x"})
	if _, _, err := e.st.Cancel(e.ctx, "cancelled-old", ""); err != nil {
		t.Fatal(err)
	}
	stray := mkdir("not-a-run")
	e.clk.Add(20 * 24 * time.Hour)
	recentDir := filepath.Join(e.home, "runs", runTask("recent", queue.RunSucceeded))
	e.add(queue.Spec{ID: "live", Queue: "q"})
	liveRun := e.claim("q", "live", time.Hour)
	liveDir := mkdir(liveRun.RunID)

	// Old tasks finished 31 days ago; the failed one 31 days ago too,
	// but its retention here is 40 days.
	e.clk.Add(11*24*time.Hour + time.Millisecond)
	var progress []map[string]int
	r := queue.DefaultRetention()
	r.Failed = 40 * 24 * time.Hour
	counts, err := maintenance.Cleanup(e.ctx, e.st, maintenance.CleanupOptions{
		Retention: r, Home: e.home, Batch: 3,
		Progress: func(c map[string]int) {
			progress = append(progress, map[string]int{"done": c["done"], "cancelled": c["cancelled"]})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts["done"] != 7 || counts["cancelled"] != 1 || counts["failed"] != 0 {
		t.Errorf("counts %v, want 7 done, 1 cancelled, 0 failed", counts)
	}
	if len(progress) != 4 || progress[0]["done"] != 3 || progress[2]["done"] != 7 || progress[3]["cancelled"] != 1 {
		t.Errorf("progress %v, want batches of at most 3: 3, 6, 7 done, then 1 cancelled", progress)
	}
	for _, d := range oldDirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("run folder %s of a deleted task still there (%v)", d, err)
		}
	}
	for _, d := range []string{failedDir, recentDir, liveDir, stray} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("folder %s of a kept task is gone: %v", d, err)
		}
	}
	var left []string
	rows, err := sqlite.DBOf(e.st.Backend()).SQL.Query(`SELECT id FROM tasks`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	rows.Close()
	sort.Strings(left)
	if !slices.Equal(left, []string{"failed-recent", "live", "recent"}) {
		t.Errorf("tasks left %v", left)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE task_id LIKE 'old%' OR task_id = 'cancelled-old'`); n != 0 {
		t.Errorf("%d events of deleted tasks left", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM runs WHERE task_id LIKE 'old%'`); n != 0 {
		t.Errorf("%d runs of deleted tasks left", n)
	}
	// Freed pages were given back (incremental auto-vacuum).
	if n := e.count(`PRAGMA freelist_count`); n != 0 {
		t.Errorf("freelist_count %d after cleanup, want 0", n)
	}
	// A second cleanup finds nothing.
	counts, err = maintenance.Cleanup(e.ctx, e.st, maintenance.CleanupOptions{Retention: r, Home: e.home})
	if err != nil || counts["done"]+counts["cancelled"]+counts["failed"] != 0 {
		t.Errorf("second cleanup: %v %v", counts, err)
	}
}

// TestCleanupFinishesWhatAKilledCleanupLeft: a cleanup killed between a
// batch's commit and the removal of its run folders leaves them behind,
// noted in its cleanup-PID.pending file; the next cleanup removes the
// folders of the noted runs that are no longer stored (only those), and
// the file. A pending file of a process still running is left alone.
func TestCleanupFinishesWhatAKilledCleanupLeft(t *testing.T) {
	e := hbSetup(t)
	runTask := func(id string) string {
		e.add(queue.Spec{ID: id, Queue: "q"})
		c := e.claim("q", id, time.Hour)
		e.start(c, 0)
		e.finish(c, queue.RunSucceeded, 0)
		dir := filepath.Join(e.home, "runs", c.RunID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return c.RunID
	}
	gone := runTask("gone")
	e.clk.Add(2 * time.Hour)
	kept := runTask("kept")
	// The killed cleanup noted both runs, deleted "gone" and died.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pending := filepath.Join(e.home, fmt.Sprintf("cleanup-%d.pending", dead.Process.Pid))
	if err := os.WriteFile(pending, []byte(gone+"\n"+kept+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	alive := filepath.Join(e.home, fmt.Sprintf("cleanup-%d.pending", os.Getppid()))
	if err := os.WriteFile(alive, []byte(gone+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := queue.Retention{Done: time.Hour, Cancelled: time.Hour, Failed: time.Hour}
	if n, _, err := e.st.DeleteExpired(e.ctx, queue.TaskDone, r, 10); err != nil || n != 1 {
		t.Fatalf("DeleteExpired = %d, %v; want the one old task", n, err)
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", gone)); err != nil {
		t.Fatalf("the deleted run's folder should still be there before the next cleanup: %v", err)
	}

	counts, err := maintenance.Cleanup(e.ctx, e.st, maintenance.CleanupOptions{Retention: r, Home: e.home})
	if err != nil || counts["done"] != 0 {
		t.Fatalf("cleanup: %v, %v; want nothing more deleted", counts, err)
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", gone)); !os.IsNotExist(err) {
		t.Errorf("the folder of run %s, deleted by the killed cleanup, is still there (%v)", gone, err)
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", kept)); err != nil {
		t.Errorf("the folder of a stored run was removed: %v", err)
	}
	// The killed cleanup's event windows were swept too.
	var evGone, evKept int
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRow(`SELECT COUNT(*) FILTER (WHERE task_id = 'gone'), COUNT(*) FILTER (WHERE task_id = 'kept') FROM events`).Scan(&evGone, &evKept); err != nil {
		t.Fatal(err)
	}
	if evGone != 0 || evKept == 0 {
		t.Errorf("events after the cleanup: %d of the deleted task (want 0), %d of the kept one", evGone, evKept)
	}
	if _, err := os.Stat(pending); !os.IsNotExist(err) {
		t.Errorf("the dead cleanup's pending file is still there (%v)", err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("the pending file of a running process was touched: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(e.home, fmt.Sprintf("cleanup-%d.pending", os.Getpid())))
	if len(matches) != 0 {
		t.Errorf("this cleanup left its own pending file: %v", matches)
	}
}

// TestCleanupLetsOtherWritersIn: cleanup deletes in batches so that
// workers are never blocked for long. While a cleanup
// of many expired tasks runs, another connection (a worker's lease
// renewal, a producer) writes a small row every 10 ms; none of its writes
// may wait long. The store is built straight in SQL (see bench_test.go).
func TestCleanupLetsOtherWritersIn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a store of 60k tasks")
	}
	storetest.NeedSQLite(t)
	path := filepath.Join(t.TempDir(), "cq.db")
	benchBuild(t, path, 60_000, "expired")
	ctx := context.Background()
	d, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st := queue.New(d.Store())
	st.Now = func() time.Time { return benchNow }
	d2, err := sqlite.Open(ctx, path) // its own pool, as another process
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	other := queue.New(d2.Store())

	stop := make(chan struct{})
	var worst time.Duration
	writes := 0
	var probe sync.WaitGroup
	probe.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			t0 := time.Now()
			if err := other.SetSystemState(ctx, map[string]string{"probe": t0.String()}); err != nil {
				t.Errorf("the other writer failed: %v", err)
				return
			}
			worst = max(worst, time.Since(t0))
			writes++
		}
	})
	start := time.Now()
	var batches []time.Duration
	last := start
	counts, err := maintenance.Cleanup(ctx, st, maintenance.CleanupOptions{
		Retention: queue.DefaultRetention(),
		Progress: func(map[string]int) {
			batches = append(batches, time.Since(last))
			last = time.Now()
		},
	})
	took := time.Since(start)
	close(stop)
	probe.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := counts["done"] + counts["cancelled"] + counts["failed"]; n != 60_000 {
		t.Fatalf("cleanup deleted %d tasks (%v), want 60000", n, counts)
	}
	t.Logf("cleanup took %v in %d batches (longest between two progress reports %v); the other writer wrote %d times, longest wait %v",
		took.Round(time.Millisecond), len(batches), slices.Max(batches).Round(time.Millisecond), writes, worst.Round(time.Millisecond))
	// A waiter polls (SQLite's busy handler) at most 100 ms apart: it
	// should get in at its first polls, and so write at least once per
	// 100 ms on average, never waiting a second.
	if worst > time.Second {
		t.Errorf("a small write waited %v during cleanup (%v in all); want under 1s", worst.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	if writes < int(took/(100*time.Millisecond)) {
		t.Errorf("the other writer wrote %d times in %v (every 10 ms when it can); want at least one write per 100 ms", writes, took.Round(time.Millisecond))
	}
}

// hbRecorder records what a checker reports.
type hbRecorder struct{ errs []string }

func (r *hbRecorder) Helper() {}
func (r *hbRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckEventsCatches shows hbCheckEvents can fail.
func TestCheckEventsCatches(t *testing.T) {
	ev := func(kind, run, from, to string) queue.Event {
		task := "t"
		e := queue.Event{Kind: kind, TaskID: &task}
		if run != "" {
			e.RunID = &run
		}
		if from != "" {
			e.From = &from
		}
		if to != "" {
			e.To = &to
		}
		return e
	}
	base := []queue.Event{
		ev("task.created", "", "", "inbox"),
		ev("task.todo", "", "inbox", "todo"),
		ev("task.doing", "", "todo", "doing"),
		ev("run.queued", "r", "", "queued"),
		ev("run.running", "r", "queued", "running"),
		ev("run.succeeded", "r", "running", "succeeded"),
		ev("task.done", "", "doing", "done"),
	}
	for name, extra := range map[string]queue.Event{
		"reaped after success": ev("run.failed", "r", "running", "failed"),
		"second terminal":      ev("run.failed", "r", "succeeded", "failed"),
		"promoted from done":   ev("task.todo", "", "blocked", "todo"),
		"done to todo":         ev("task.todo", "", "done", "todo"),
	} {
		rec := &hbRecorder{}
		hbCheckEvents(rec, append(append([]queue.Event{}, base...), extra))
		if len(rec.errs) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
	rec := &hbRecorder{}
	hbCheckEvents(rec, base)
	if len(rec.errs) != 0 {
		t.Errorf("valid log reported: %q", rec.errs)
	}
}

// TestClearQueueInSteps: cq queue clear cancels every task of the queue
// that is not doing, with their dependents in other queues, in steps of
// at most CleanupBatch tasks (each its own transaction); tasks of other
// queues, and tasks stored after the clear began, are left alone.
func TestClearQueueInSteps(t *testing.T) {
	e := hbSetup(t)
	const n = 2*maintenance.CleanupBatch + 50
	for i := range n {
		sp := queue.Spec{ID: fmt.Sprintf("c%03d", i), Queue: "q"}
		switch i % 3 {
		case 1:
			sp.Hold = true // blocked
		case 2:
			sp.Delay = "1h" // blocked too
		}
		e.add(sp)
	}
	e.add(queue.Spec{ID: "run", Queue: "q"})
	running := e.claim("q", "", time.Hour) // the oldest todo one
	e.add(queue.Spec{ID: "dependent", Queue: "other", After: []string{"c003"}})
	e.add(queue.Spec{ID: "bystander", Queue: "other"})

	// A task far beyond the others in rowid order: the steps reach it
	// through windows that read few rows each.
	e.exec(`UPDATE tasks SET rowid = 100000 WHERE id = 'c449'`)

	bound, err := e.st.ClearQueueStart(e.ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	// The first step cancels its CleanupBatch tasks and, with c003, the
	// dependent in the other queue: the count says so.
	firstIDs, next, err := e.st.ClearQueueStep(e.ctx, "q", 0, bound, maintenance.CleanupBatch)
	first := len(firstIDs)
	if err != nil || first != maintenance.CleanupBatch+1 || next == 0 {
		t.Fatalf("first step: %d cancelled, next %d, %v; want %d and more to go", first, next, err, maintenance.CleanupBatch+1)
	}
	e.add(queue.Spec{ID: "late", Queue: "q"}) // after the clear began
	rest := 0
	for next != 0 {
		var ids []string
		ids, next, err = e.st.ClearQueueStep(e.ctx, "q", next, bound, maintenance.CleanupBatch)
		if err != nil {
			t.Fatal(err)
		}
		k := len(ids)
		if k > maintenance.CleanupBatch {
			t.Fatalf("a step cancelled %d tasks, more than %d", k, maintenance.CleanupBatch)
		}
		rest += k
	}
	// n tasks and "run", less the one claimed, and the dependent.
	if first+rest != n+1 {
		t.Errorf("cancelled %d, want %d", first+rest, n+1)
	}
	state := func(id string) string {
		tk, err := e.st.Get(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return tk.State
	}
	for id, want := range map[string]string{
		running.TaskID: queue.TaskDoing, "dependent": queue.TaskCancelled,
		"bystander": queue.TaskTodo, "late": queue.TaskTodo, "c001": queue.TaskCancelled, "c002": queue.TaskCancelled,
		"c449": queue.TaskCancelled,
	} {
		if got := state(id); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	// The whole clear, as the command runs it: "late" now, nothing else.
	if got, err := maintenance.ClearQueue(e.ctx, e.st, "q", nil); err != nil || got != 1 {
		t.Errorf("ClearQueue = %d, %v; want the one task left", got, err)
	}
	if _, err := maintenance.ClearQueue(e.ctx, e.st, "nosuch", nil); queue.KindOf(err) != queue.NotFound {
		t.Errorf("ClearQueue of a queue nothing named: %v; want not found", err)
	}
}

// TestClearQueueLeavesATaskThatReusedARowid: a task stored after a clear
// began is left alone even when it took a rowid below the clear's bound
// (a cleanup deleted the newest task meanwhile, freeing its rowid).
func TestClearQueueLeavesATaskThatReusedARowid(t *testing.T) {
	e := hbSetup(t)
	e.add(queue.Spec{ID: "old1", Queue: "q"})
	e.add(queue.Spec{ID: "old2", Queue: "q"})
	e.add(queue.Spec{ID: "newest", Queue: "other"})
	bound, err := e.st.ClearQueueStart(e.ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	var freed int64
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRow(`SELECT rowid FROM tasks WHERE id = 'newest'`).Scan(&freed); err != nil {
		t.Fatal(err)
	}
	e.exec(`DELETE FROM tasks WHERE id = 'newest'`) // as a cleanup would
	e.clk.Add(time.Millisecond)
	e.add(queue.Spec{ID: "reborn", Queue: "q"})
	var got int64
	if err := sqlite.DBOf(e.st.Backend()).SQL.QueryRow(`SELECT rowid FROM tasks WHERE id = 'reborn'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != freed || got > bound.Upto {
		t.Fatalf("the new task has rowid %d; the test wants it to reuse %d, within the bound %d", got, freed, bound.Upto)
	}
	total := 0
	for after := int64(0); ; {
		ids, next, err := e.st.ClearQueueStep(e.ctx, "q", after, bound, maintenance.CleanupBatch)
		if err != nil {
			t.Fatal(err)
		}
		total += len(ids)
		if next == 0 {
			break
		}
		after = next
	}
	if total != 2 {
		t.Errorf("cancelled %d, want the 2 old tasks", total)
	}
	if tk, err := e.st.Get(e.ctx, "reborn"); err != nil || tk.State != queue.TaskTodo {
		t.Errorf("the task stored after the clear began: %v, %v; want todo", tk, err)
	}
}

// TestPassWarnsAboutEveryWaitingTask: cq heartbeat (AllWarnings) warns
// about every task waiting too long, beyond one step's WarnBatch per
// queue, so that health's count is whole after one pass; a worker's pass
// warns one step's worth and the next passes go on.
func TestPassWarnsAboutEveryWaitingTask(t *testing.T) {
	t.Parallel()
	e := hbSetup(t)
	n := queue.WarnBatch*2 + 7
	specs := make([]queue.Spec, n)
	for i := range specs {
		sp, err := queue.Spec{Cmd: []string{"true"}}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = sp
	}
	if _, err := e.st.Create(e.ctx, specs, queue.CreateOptions{Enqueue: true}); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Hour) // past the default warn-after, 10 minutes
	if r := e.pass(maintenance.Options{}); r.Warned != queue.WarnBatch {
		t.Errorf("a worker's pass warned %d, want one step's %d", r.Warned, queue.WarnBatch)
	}
	if r := e.pass(maintenance.Options{AllWarnings: true}); r.Warned != n-queue.WarnBatch {
		t.Errorf("cq heartbeat's pass warned %d, want the other %d", r.Warned, n-queue.WarnBatch)
	}
	if got := e.count(`SELECT COUNT(*) FROM events WHERE kind = 'task.waiting'`); got != n {
		t.Errorf("%d task.waiting events, want one for each of %d tasks", got, n)
	}
	h, err := e.st.Health(e.ctx, queue.DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if h.WaitingWarned != n {
		t.Errorf("health counts %d waiting, want %d", h.WaitingWarned, n)
	}
}

// TestPassWritesMissingSummaries: a run whose end is recorded but whose
// summary.json is missing (its worker was killed between the two) gets one
// from a later pass, once its worker's own write had time (10 s); a run
// that has its summary is left alone, and the next pass goes on after the
// last run it looked at.
func TestPassWritesMissingSummaries(t *testing.T) {
	t.Parallel()
	e := hbSetup(t)
	end := func(id string) *queue.Claimed {
		e.add(queue.Spec{ID: id})
		c := e.claim("default", id, time.Minute)
		e.start(c, 0)
		e.finish(c, queue.RunSucceeded, 0)
		return c
	}
	lost := end("lost")
	kept := end("kept")
	// A full disk left this one's summary empty.
	empty := end("empty")
	emptySummary := filepath.Join(e.home, "runs", empty.RunID, "summary.json")
	if err := os.MkdirAll(filepath.Dir(emptySummary), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptySummary, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	keptSummary := filepath.Join(e.home, "runs", kept.RunID, "summary.json")
	if err := os.MkdirAll(filepath.Dir(keptSummary), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keptSummary, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.pass(maintenance.Options{Home: e.home}); r.Summaries != 0 {
		t.Fatalf("a pass right after the ends wrote %d summaries, want 0 (the workers' own writes come first)", r.Summaries)
	}
	e.clk.Add(11 * time.Second)
	if r := e.pass(maintenance.Options{Home: e.home}); r.Summaries != 2 {
		t.Fatalf("a pass 11 s later wrote %d summaries, want 2 (the missing one and the empty one)", r.Summaries)
	}
	if b, err := os.ReadFile(emptySummary); err != nil || !strings.Contains(string(b), empty.RunID) {
		t.Fatalf("the empty summary was not rewritten: %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(e.home, "runs", lost.RunID, "summary.json"))
	if err != nil || !strings.Contains(string(b), `"state": "succeeded"`) || !strings.Contains(string(b), lost.RunID) {
		t.Fatalf("the lost run's summary: %s, %v", b, err)
	}
	if b, _ := os.ReadFile(keptSummary); string(b) != "{}\n" {
		t.Errorf("a run's own summary was rewritten: %s", b)
	}
	if r := e.pass(maintenance.Options{Home: e.home}); r.Summaries != 0 {
		t.Errorf("the next pass wrote %d summaries, want 0", r.Summaries)
	}
}

// TestSaveSummaryMakesNoFolder: a worker's summary write, just after the
// run's end, does not bring back a folder cq cleanup removed meanwhile
// (with its run); into a folder that is there it writes as before.
func TestSaveSummaryMakesNoFolder(t *testing.T) {
	t.Parallel()
	e := hbSetup(t)
	var runs []queue.Run
	for _, id := range []string{"gone", "here"} {
		e.add(queue.Spec{ID: id})
		c := e.claim("default", id, time.Minute)
		e.start(c, 0)
		e.finish(c, queue.RunSucceeded, 0)
		rs, err := e.st.Runs(e.ctx, id)
		if err != nil || len(rs) != 1 {
			t.Fatalf("runs of %s: %v, %v", id, rs, err)
		}
		runs = append(runs, rs[0])
	}
	here := filepath.Join(e.home, "runs", runs[1].ID)
	if err := os.MkdirAll(here, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		maintenance.SaveSummary(e.home, r)
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", runs[0].ID)); !os.IsNotExist(err) {
		t.Fatalf("SaveSummary made the folder of a run whose folder was gone (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(here, "summary.json")); err != nil || !strings.Contains(string(b), runs[1].ID) {
		t.Fatalf("summary in an existing folder: %q, %v", b, err)
	}
}

// TestSummaryNeverWrittenThroughALink: a link at a run's summary.json, at
// its folder or at the runs folder is not written through, by the
// worker's write (SaveSummary) nor by a pass's (WriteSummary, which makes
// a missing folder); the file it points at keeps its content and mode.
func TestSummaryNeverWrittenThroughALink(t *testing.T) {
	t.Parallel()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, at := range []string{"summary.json", "run folder", "runs folder"} {
		t.Run(at, func(t *testing.T) {
			e := hbSetup(t)
			e.add(queue.Spec{ID: "t"})
			c := e.claim("default", "t", time.Minute)
			e.start(c, 0)
			e.finish(c, queue.RunSucceeded, 0)
			rs, err := e.st.Runs(e.ctx, "t")
			if err != nil || len(rs) != 1 {
				t.Fatalf("runs: %v, %v", rs, err)
			}
			elsewhere := t.TempDir()
			runs := filepath.Join(e.home, "runs")
			switch at {
			case "summary.json":
				if err := os.MkdirAll(filepath.Join(runs, rs[0].ID), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(victim, filepath.Join(runs, rs[0].ID, "summary.json")); err != nil {
					t.Fatal(err)
				}
			case "run folder":
				if err := os.MkdirAll(runs, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(elsewhere, filepath.Join(runs, rs[0].ID)); err != nil {
					t.Fatal(err)
				}
			case "runs folder":
				if err := os.Symlink(elsewhere, runs); err != nil {
					t.Fatal(err)
				}
			}
			maintenance.SaveSummary(e.home, rs[0])
			maintenance.WriteSummary(e.ctx, e.st, e.home, "t", rs[0].ID)
			if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
				t.Errorf("the link's target holds %q (%v), want it as it was", b, err)
			}
			if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("the link's target's mode changed: %v (%v)", fi.Mode(), err)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("the linked folder got %d entries", len(ents))
			}
		})
	}
}

// TestPassSweepsWorkersDeadForADay: a pass deletes the row of a worker
// whose lease passed more than a day ago, and keeps one dead for less
// (its start time shows whether a later sign of life found it kept).
func TestPassSweepsWorkersDeadForADay(t *testing.T) {
	t.Parallel()
	e := hbSetup(t)
	seen := func(id string) {
		t.Helper()
		if err := e.st.WorkerSeen(e.ctx, queue.WorkerParams{ID: id, Host: "h", PID: 1, Concurrency: 1, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	seen("long-dead")
	e.clk.Add(2 * time.Hour)
	seen("recent")
	e.clk.Add(23 * time.Hour)
	e.pass(maintenance.Options{})
	seen("long-dead")
	seen("recent")
	ws, err := e.st.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	started := map[string]string{}
	for _, w := range ws {
		started[w.ID] = w.StartedAt
	}
	if want := queue.FormatTime(e.clk.Now()); started["long-dead"] != want {
		t.Errorf("long-dead started %s, want %s: its row should have been deleted and written anew", started["long-dead"], want)
	}
	if want := queue.FormatTime(hbT0.Add(2 * time.Hour)); started["recent"] != want {
		t.Errorf("recent started %s, want %s: its row should have been kept", started["recent"], want)
	}
}
