package queue_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// TestTaskTransitions walks every (from, to) pair of the task state machine
// (docs/semantics.md, Task states). For each pair it puts a fresh task into from, in every
// way that matters (a blocked task held, scheduled or waiting on a
// dependency; a doing task whose run is queued or running), and asks for to
// with every user operation that could produce it: SetState(to), and the
// command behind it (enqueue, release, retry for todo; hold, enqueue,
// retry for blocked; cancel for cancelled).
//
// An operation listed in transitionOutcomes must succeed with exactly the
// events listed there, and a second identical attempt must be refused or
// be a no-op, as listed. Every other operation must be refused with a
// conflict and change nothing: no row of any table, no event.
func TestTaskTransitions(t *testing.T) {
	t.Parallel()
	storetest.NeedSQLite(t) // forceRun writes SQLite's rows
	var refusals refusalLog
	t.Run("matrix", func(t *testing.T) { transitionMatrix(t, &refusals) })

	// An illegal transition requested by a user is refused with exit
	// code 3 and a message naming the current state.
	// Checked apart from the matrix so that a wording gap shows up as one
	// failure listing every message, not as a failure of every pair.
	t.Run("refusals name the current state", func(t *testing.T) {
		refusals.mu.Lock()
		defer refusals.mu.Unlock()
		if len(refusals.list) == 0 {
			t.Fatal("the matrix recorded no refusals")
		}
		var bad []string
		for _, r := range refusals.list {
			if !strings.Contains(r.msg, r.state) {
				bad = append(bad, fmt.Sprintf("  %s: %q", r.name, r.msg))
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			t.Errorf("deviation from the run rules: %d of %d refusals do not name the task's current state:\n%s",
				len(bad), len(refusals.list), strings.Join(bad, "\n"))
		}
	})
}

// refusalLog collects the messages of the matrix's refusals.
type refusalLog struct {
	mu   sync.Mutex
	list []refusal
}

type refusal struct{ name, state, msg string }

func (l *refusalLog) add(name, state, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, refusal{name, state, msg})
}

func transitionMatrix(t *testing.T, refusals *refusalLog) {
	for _, from := range queue.TaskStates {
		for _, to := range queue.TaskStates {
			cases := 0
			for _, s := range transitionSetups {
				if s.state != from {
					continue
				}
				for _, op := range opsFor(to) {
					out, ok := transitionOutcomes[[2]string{s.name, op.name}]
					if ok && out.state != to && out.state != from {
						// This operation's success ends in a third state: the
						// pair (from, out.state) covers it.
						continue
					}
					cases++
					name := fmt.Sprintf("%s→%s/%s/%s", from, to, s.name, op.name)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						b := setup(t)
						id := s.make(t, b)
						if ok {
							checkSuccess(t, b, id, from, op, out)
						} else {
							msg := checkRefused(t, b, id, op, queue.Conflict)
							refusals.add(name, from, msg)
						}
					})
				}
			}
			if cases == 0 {
				t.Errorf("the pair %s → %s has no case", from, to)
			}
		}
	}

	// An unknown target state is bad input, whatever the task's state.
	for _, s := range transitionSetups {
		t.Run("unknown-target/"+s.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := s.make(t, b)
			for _, target := range []string{"running", "", "TODO", "todo "} {
				op := transitionOp{"SetState(" + target + ")", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
					return st.SetState(ctx, id, target, "")
				}}
				checkRefused(t, b, id, op, queue.Invalid)
			}
		})
	}
}

// TestTaskTransitionTableIsCovered checks the test table against the state
// machine: every outcome it expects is a transition the state machine allows, and every
// allowed transition a user command can perform has an outcome that
// performs it.
func TestTaskTransitionTableIsCovered(t *testing.T) {
	t.Parallel()
	states := map[string]string{}
	for _, s := range transitionSetups {
		states[s.name] = s.state
	}
	performed := map[[2]string]bool{}
	for k, out := range transitionOutcomes {
		from, ok := states[k[0]]
		if !ok {
			t.Fatalf("outcome for unknown setup %q", k[0])
		}
		if out.state != from {
			if !queue.TaskTransitionAllowed(from, out.state) {
				t.Errorf("%s/%s expects %s → %s, which the task state machine does not allow", k[0], k[1], from, out.state)
			}
			performed[[2]string{from, out.state}] = true
		}
		for _, e := range out.events {
			if e.kind == "task" && e.from != e.to && !queue.TaskTransitionAllowed(e.from, e.to) {
				t.Errorf("%s/%s expects an event %s → %s, which the task state machine does not allow", k[0], k[1], e.from, e.to)
			}
		}
	}
	for _, from := range queue.TaskStates {
		for _, to := range queue.TaskStates {
			pair := [2]string{from, to}
			why, notUser := notByUser[pair]
			allowed := queue.TaskTransitionAllowed(from, to)
			switch {
			case allowed && !notUser && !performed[pair]:
				t.Errorf("%s → %s is allowed but no user operation in the table performs it", from, to)
			case notUser && !allowed:
				t.Errorf("notByUser lists %s → %s, which is not allowed at all", from, to)
			case notUser && performed[pair]:
				t.Errorf("%s → %s is listed as not by a user (%s), yet a user operation performs it", from, to, why)
			}
		}
	}
}

// notByUser lists the allowed transitions no user command performs.
var notByUser = map[[2]string]string{
	{queue.TaskTodo, queue.TaskDoing}:     "a worker's claim",
	{queue.TaskDoing, queue.TaskDone}:     "its run succeeded",
	{queue.TaskDoing, queue.TaskBlocked}:  "its run failed with budget left",
	{queue.TaskDoing, queue.TaskFailed}:   "its run failed with no budget left",
	{queue.TaskDoing, queue.TaskTodo}:     "a stopping worker released it",
	{queue.TaskFailed, queue.TaskBlocked}: "cq retry of a failed task with a hold or an unmet dependency, but a task only fails after running, which a hold or an unmet dependency prevents",
}

// transitionSetup puts a fresh task into state through the public API
// where it can, and returns the task's id.
type transitionSetup struct {
	name  string
	state string
	make  func(t *testing.T, b *bundle) string
}

var transitionSetups = []transitionSetup{
	{"inbox", queue.TaskInbox, func(t *testing.T, b *bundle) string {
		return b.create(t, queue.Spec{}, false).ID
	}},
	{"inbox-held", queue.TaskInbox, func(t *testing.T, b *bundle) string {
		return b.create(t, queue.Spec{Hold: true}, false).ID
	}},
	{"todo", queue.TaskTodo, func(t *testing.T, b *bundle) string {
		return b.enq(t, queue.Spec{})
	}},
	{"blocked-hold", queue.TaskBlocked, func(t *testing.T, b *bundle) string {
		return b.enq(t, queue.Spec{Hold: true})
	}},
	{"blocked-scheduled", queue.TaskBlocked, func(t *testing.T, b *bundle) string {
		return b.enq(t, queue.Spec{Delay: "1h"})
	}},
	{"blocked-dependency", queue.TaskBlocked, func(t *testing.T, b *bundle) string {
		dep := b.enq(t, queue.Spec{ID: "dep"})
		return b.enq(t, queue.Spec{After: []string{dep}})
	}},
	{"doing-queued", queue.TaskDoing, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{})
		forceRun(t, b, id, queue.RunQueued)
		return id
	}},
	{"doing-running", queue.TaskDoing, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{})
		forceRun(t, b, id, queue.RunRunning)
		return id
	}},
	{"done", queue.TaskDone, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{})
		forceRun(t, b, id, queue.RunSucceeded)
		return id
	}},
	{"failed", queue.TaskFailed, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{})
		forceRun(t, b, id, queue.RunFailed)
		return id
	}},
	{"cancelled", queue.TaskCancelled, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{})
		mustOp(t, b, "Cancel", id, func() error { _, _, err := b.st.Cancel(b.ctx, id, ""); return err })
		return id
	}},
	{"cancelled-held", queue.TaskCancelled, func(t *testing.T, b *bundle) string {
		id := b.enq(t, queue.Spec{Hold: true})
		mustOp(t, b, "Cancel", id, func() error { _, _, err := b.st.Cancel(b.ctx, id, ""); return err })
		return id
	}},
	{"cancelled-dependency", queue.TaskCancelled, func(t *testing.T, b *bundle) string {
		dep := b.enq(t, queue.Spec{ID: "dep"})
		id := b.enq(t, queue.Spec{After: []string{dep}})
		mustOp(t, b, "Cancel", id, func() error { _, _, err := b.st.Cancel(b.ctx, id, ""); return err })
		return id
	}},
}

func mustOp(t *testing.T, b *bundle, what, id string, fn func() error) {
	t.Helper()
	if err := fn(); err != nil {
		t.Fatalf("setup: %s %s: %v", what, id, err)
	}
}

// forceRun moves a todo task on as a worker would: into doing with a run in
// runState, and for a finished run on into done or failed. The worker's
// claim and finish API does not exist yet, so this test-only helper writes
// the rows and their events directly through sqlite.DBOf(st.Backend()).SQL, as one
// transaction; a later change will replace it with the real claim/finish
// calls. It touches nothing a user command's refusal could be blamed for:
// the transitions under test start from what it leaves.
func forceRun(t *testing.T, b *bundle, id, runState string) {
	t.Helper()
	now := queue.FormatTime(b.clock.Now())
	tx, err := sqlite.DBOf(b.st.Backend()).SQL.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	exec := func(q string, args ...any) {
		t.Helper()
		res, err := tx.ExecContext(b.ctx, q, args...)
		if err != nil {
			t.Fatalf("forceRun: %v\n%s", err, q)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("forceRun: %d rows affected, want 1\n%s", n, q)
		}
	}
	event := func(kind, run, from, to string) {
		t.Helper()
		exec(`INSERT INTO events (at, kind, task_id, run_id, from_state, to_state) VALUES (?, ?, ?, ?, NULLIF(?, ''), ?)`,
			now, kind, id, run, from, to)
	}
	runID := "run-" + id
	exec(`UPDATE tasks SET state = 'doing', attempts = attempts + 1, todo_at = NULL, updated_at = ? WHERE id = ? AND state = 'todo'`, now, id)
	event("task.doing", "", queue.TaskTodo, queue.TaskDoing)
	exec(`INSERT INTO runs (id, task_id, attempt, state, queue, worker, host, lease_token, lease_expires_at, created_at)
		VALUES (?, ?, 1, 'queued', 'default', 'test-worker', 'test-host', 'token', ?, ?)`, runID, id, now, now)
	event("run.queued", runID, "", queue.RunQueued)
	if runState == queue.RunQueued {
		mustCommit(t, tx.Commit())
		return
	}
	exec(`UPDATE runs SET state = 'running', started_at = ? WHERE id = ?`, now, runID)
	event("run.running", runID, queue.RunQueued, queue.RunRunning)
	if runState == queue.RunRunning {
		mustCommit(t, tx.Commit())
		return
	}
	taskState, exitCode := queue.TaskDone, 0
	if runState == queue.RunFailed {
		taskState, exitCode = queue.TaskFailed, 1
	}
	exec(`UPDATE runs SET state = ?, exit_code = ?, ended_at = ? WHERE id = ?`, runState, exitCode, now, runID)
	event("run."+runState, runID, queue.RunRunning, runState)
	exec(`UPDATE tasks SET state = ?, lane_head = 0, finished_at = ?, updated_at = ? WHERE id = ? AND state = 'doing'`, taskState, now, now, id)
	event("task."+taskState, "", queue.TaskDoing, taskState)
	mustCommit(t, tx.Commit())
}

func mustCommit(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("forceRun: commit: %v", err)
	}
}

// transitionOp is one user operation on a task.
type transitionOp struct {
	name string
	do   func(ctx context.Context, st *queue.Store, id string) (string, string, error)
}

func setStateOp(target string) transitionOp {
	return transitionOp{"SetState(" + target + ")", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.SetState(ctx, id, target, "")
	}}
}

var (
	opEnqueue = transitionOp{"Enqueue", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.Enqueue(ctx, id)
	}}
	opRelease = transitionOp{"Release", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.Release(ctx, id, "")
	}}
	opRetry = transitionOp{"Retry", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.Retry(ctx, id, "")
	}}
	opHold = transitionOp{"Hold", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.Hold(ctx, id, "")
	}}
	opCancel = transitionOp{"Cancel", func(ctx context.Context, st *queue.Store, id string) (string, string, error) {
		return st.Cancel(ctx, id, "")
	}}
)

// opsFor lists the user operations that could move a task to target.
func opsFor(target string) []transitionOp {
	ops := []transitionOp{setStateOp(target)}
	switch target {
	case queue.TaskTodo:
		ops = append(ops, opEnqueue, opRelease, opRetry)
	case queue.TaskBlocked:
		ops = append(ops, opHold, opEnqueue, opRetry)
	case queue.TaskCancelled:
		ops = append(ops, opCancel)
	}
	return ops
}

// wantEvent is an event a successful operation appends: "task" or "run",
// with its from and to.
type wantEvent struct{ kind, from, to string }

func taskEv(from, to string) wantEvent { return wantEvent{"task", from, to} }
func runEv(from, to string) wantEvent  { return wantEvent{"run", from, to} }

// outcome is what a successful operation leads to.
type outcome struct {
	state  string      // the task's state afterwards
	events []wantEvent // exactly the events appended, in order
	// againNoop says a second identical attempt succeeds and changes
	// nothing; otherwise it must be refused with a conflict.
	againNoop bool
}

const (
	inbox     = queue.TaskInbox
	todo      = queue.TaskTodo
	blocked   = queue.TaskBlocked
	doing     = queue.TaskDoing
	cancelled = queue.TaskCancelled
)

// transitionOutcomes lists every (setup, operation) that succeeds
// (docs/semantics.md, docs/commands.md). Anything not listed must be refused.
var transitionOutcomes = map[[2]string]outcome{
	// The gateway step.
	{"inbox", "Enqueue"}:        {todo, []wantEvent{taskEv(inbox, todo)}, false},
	{"inbox", "SetState(todo)"}: {todo, []wantEvent{taskEv(inbox, todo)}, false},
	{"inbox-held", "Enqueue"}:   {blocked, []wantEvent{taskEv(inbox, blocked)}, false},
	// SetState(todo) on a held inbox task would end blocked: refused.
	// A hold on an inbox task is recorded without a change of state
	// (the task state machine); holding a held task is a no-op. So
	// SetState(blocked) on an inbox task, which would end inbox, is refused.
	{"inbox", "Hold"}:         {inbox, []wantEvent{taskEv(inbox, inbox)}, true},
	{"inbox-held", "Hold"}:    {inbox, nil, true},
	{"inbox-held", "Release"}: {inbox, []wantEvent{taskEv(inbox, inbox)}, false},
	// Hold: todo → blocked; a blocked task gains a hold in place.
	{"todo", "Hold"}:                            {blocked, []wantEvent{taskEv(todo, blocked)}, true},
	{"todo", "SetState(blocked)"}:               {blocked, []wantEvent{taskEv(todo, blocked)}, true},
	{"blocked-hold", "Hold"}:                    {blocked, nil, true},
	{"blocked-hold", "SetState(blocked)"}:       {blocked, nil, true},
	{"blocked-scheduled", "Hold"}:               {blocked, []wantEvent{taskEv(blocked, blocked)}, true},
	{"blocked-scheduled", "SetState(blocked)"}:  {blocked, []wantEvent{taskEv(blocked, blocked)}, true},
	{"blocked-dependency", "Hold"}:              {blocked, []wantEvent{taskEv(blocked, blocked)}, true},
	{"blocked-dependency", "SetState(blocked)"}: {blocked, []wantEvent{taskEv(blocked, blocked)}, true},
	// Release and retry: blocked → todo when nothing else blocks.
	{"blocked-hold", "Release"}:             {todo, []wantEvent{taskEv(blocked, todo)}, false},
	{"blocked-hold", "SetState(todo)"}:      {todo, []wantEvent{taskEv(blocked, todo)}, false},
	{"blocked-scheduled", "Retry"}:          {todo, []wantEvent{taskEv(blocked, todo)}, false},
	{"blocked-scheduled", "SetState(todo)"}: {todo, []wantEvent{taskEv(blocked, todo)}, false},
	// Retry: failed/cancelled → todo, or blocked if a hold or an unmet
	// dependency remains.
	{"failed", "Retry"}:               {todo, []wantEvent{taskEv(queue.TaskFailed, todo)}, false},
	{"failed", "SetState(todo)"}:      {todo, []wantEvent{taskEv(queue.TaskFailed, todo)}, false},
	{"cancelled", "Retry"}:            {todo, []wantEvent{taskEv(cancelled, todo)}, false},
	{"cancelled", "SetState(todo)"}:   {todo, []wantEvent{taskEv(cancelled, todo)}, false},
	{"cancelled-held", "Retry"}:       {blocked, []wantEvent{taskEv(cancelled, blocked)}, false},
	{"cancelled-dependency", "Retry"}: {blocked, []wantEvent{taskEv(cancelled, blocked)}, false},
	// Cancel: inbox, todo and blocked end cancelled at once; a doing task
	// whose run has not started is cancelled with its run; a running one's
	// run goes to cancelling and the task stays doing until its worker
	// confirms (docs/semantics.md, Cancel), so SetState(cancelled) on it is refused
	// (it would not end cancelled) and a second cancel is a no-op.
	{"inbox", "Cancel"}:                           {cancelled, []wantEvent{taskEv(inbox, cancelled)}, false},
	{"inbox", "SetState(cancelled)"}:              {cancelled, []wantEvent{taskEv(inbox, cancelled)}, false},
	{"inbox-held", "Cancel"}:                      {cancelled, []wantEvent{taskEv(inbox, cancelled)}, false},
	{"inbox-held", "SetState(cancelled)"}:         {cancelled, []wantEvent{taskEv(inbox, cancelled)}, false},
	{"todo", "Cancel"}:                            {cancelled, []wantEvent{taskEv(todo, cancelled)}, false},
	{"todo", "SetState(cancelled)"}:               {cancelled, []wantEvent{taskEv(todo, cancelled)}, false},
	{"blocked-hold", "Cancel"}:                    {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"blocked-hold", "SetState(cancelled)"}:       {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"blocked-scheduled", "Cancel"}:               {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"blocked-scheduled", "SetState(cancelled)"}:  {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"blocked-dependency", "Cancel"}:              {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"blocked-dependency", "SetState(cancelled)"}: {cancelled, []wantEvent{taskEv(blocked, cancelled)}, false},
	{"doing-queued", "Cancel"}:                    {cancelled, []wantEvent{runEv(queue.RunQueued, queue.RunCancelled), taskEv(doing, cancelled)}, false},
	{"doing-queued", "SetState(cancelled)"}:       {cancelled, []wantEvent{runEv(queue.RunQueued, queue.RunCancelled), taskEv(doing, cancelled)}, false},
	{"doing-running", "Cancel"}:                   {doing, []wantEvent{runEv(queue.RunRunning, queue.RunCancelling)}, true},
	// The store's part of set-state's cancel of a running task is cq
	// cancel's; the CLI then waits for the worker (cmd/cq).
	{"doing-running", "SetState(cancelled)"}: {doing, []wantEvent{runEv(queue.RunRunning, queue.RunCancelling)}, true},
}

// snapshotFor is what "changes nothing" compares: every table, plus the
// task's own row on its own so a failure points at it.
func snapshotFor(t *testing.T, b *bundle, id string) (string, map[string]string) {
	t.Helper()
	return b.dump(t), b.row(t, id)
}

// checkRefused runs op, which must be refused with code and change
// nothing, and returns the refusal's message.
func checkRefused(t *testing.T, b *bundle, id string, op transitionOp, code queue.Kind) string {
	t.Helper()
	before, row := snapshotFor(t, b, id)
	events := b.eventCount(t)
	gotID, state, err := op.do(b.ctx, b.st, id)
	if err == nil {
		t.Fatalf("%s on a %s task succeeded (id %s, state %s); want it refused", op.name, row["state"], gotID, state)
	}
	wantCode(t, err, code, op.name+" on a "+row["state"]+" task")
	after, rowAfter := snapshotFor(t, b, id)
	if n := b.eventCount(t); n != events {
		t.Fatalf("refused %s appended %d events", op.name, n-events)
	}
	if fmt.Sprint(row) != fmt.Sprint(rowAfter) {
		t.Fatalf("refused %s changed the task row:\nbefore %v\nafter  %v", op.name, row, rowAfter)
	}
	if after != before {
		t.Fatalf("refused %s changed the store:\nbefore:\n%s\nafter:\n%s", op.name, before, after)
	}
	return err.Error()
}

func checkSuccess(t *testing.T, b *bundle, id, from string, op transitionOp, out outcome) {
	t.Helper()
	last, err := b.st.LastSeq(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotID, state, err := op.do(b.ctx, b.st, id)
	if err != nil {
		t.Fatalf("%s on a %s task: %v; want it to succeed", op.name, from, err)
	}
	if gotID != id || state != out.state {
		t.Fatalf("%s = %s, %s; want %s, %s", op.name, gotID, state, id, out.state)
	}
	if got := b.get(t, id).State; got != out.state {
		t.Fatalf("after %s the task is %s, want %s", op.name, got, out.state)
	}
	evs, err := b.st.Events(b.ctx, last, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(out.events) {
		t.Fatalf("%s appended %d events, want %d: %s", op.name, len(evs), len(out.events), fmtEvents(evs))
	}
	for i, e := range evs {
		w := out.events[i]
		if str(e.TaskID) != id || str(e.From) != w.from || str(e.To) != w.to || !strings.HasPrefix(e.Kind, w.kind+".") {
			t.Fatalf("event %d = %s; want a %s.* event of task %s, %s → %s", i, fmtEvents(evs[i:i+1]), w.kind, id, w.from, w.to)
		}
		if (w.kind == "run") != (e.RunID != nil) {
			t.Fatalf("event %d = %s: run_id must be set exactly on run events", i, fmtEvents(evs[i:i+1]))
		}
	}

	// The same request again: refused, or a no-op that changes nothing.
	before, _ := snapshotFor(t, b, id)
	_, state, err = op.do(b.ctx, b.st, id)
	switch {
	case out.againNoop && err != nil:
		t.Fatalf("second %s: %v; want a no-op", op.name, err)
	case out.againNoop && state != out.state:
		t.Fatalf("second %s left the task %s, want %s", op.name, state, out.state)
	case !out.againNoop && err == nil:
		t.Fatalf("second %s succeeded (state %s); want it refused", op.name, state)
	case !out.againNoop:
		wantCode(t, err, queue.Conflict, "second "+op.name)
	}
	if after, _ := snapshotFor(t, b, id); after != before {
		t.Fatalf("second %s changed the store:\nbefore:\n%s\nafter:\n%s", op.name, before, after)
	}
}

func fmtEvents(evs []queue.Event) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, fmt.Sprintf("{%d %s task=%s run=%s %s→%s %q}", e.Seq, e.Kind, str(e.TaskID), str(e.RunID), str(e.From), str(e.To), str(e.Reason)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
