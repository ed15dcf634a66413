package main

// The operational commands proven through the real binary
// (docs/operations.md): cq heartbeat, cq cleanup, cq health.
//
// TestOpsScripts runs testdata/ops/*.txtar with the custom commands of
// script_test.go (status, jq, envout, mode, sql, lines, waitlines). The Go
// tests below need what a script cannot do well: fixtures with times
// relative to now, the Prometheus parser and linter, and many cq
// processes at once. Every wait is a poll on a condition with a deadline;
// nothing sleeps to fix a race.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestOpsScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "ops", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/ops")
	}
	testscript.Run(t, scriptParams(files))
}

// opsEnv is one CQ_HOME and the environment of the cq processes run on
// it. Its commands take 60 s at most; one that cannot run or takes
// longer reports exit code -1 (runIn is safe from any goroutine).
type opsEnv struct{ *cqEnv }

func opsNewEnv(t *testing.T) *opsEnv {
	t.Helper()
	return &opsEnv{newCQEnv(t, 60*time.Second, false)}
}

// code runs cq and requires exit code want.
func (e *opsEnv) code(want int, args ...string) string {
	e.t.Helper()
	out, errs, code := e.run(args...)
	if code != want {
		e.t.Errorf("cq %s: exit %d, want %d; stderr %q, stdout %q", strings.Join(args, " "), code, want, errs, out)
	}
	return out
}

// db opens the home's database directly, for fixtures and checks.
func (e *opsEnv) db() *sql.DB {
	e.t.Helper()
	d, err := sql.Open("sqlite3", "file:"+filepath.Join(e.home, "cq.db")+"?_busy_timeout=30000")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { d.Close() })
	return d
}

func opsExec(t *testing.T, d *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := d.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// opsFixture writes health fixtures: runs ended relative to now on a
// carrier task, tasks blocked for retry, and the heartbeat's age.
type opsFixture struct {
	t       *testing.T
	d       *sql.DB
	attempt int
	n       int
}

func opsNewFixture(t *testing.T, e *opsEnv) *opsFixture {
	t.Helper()
	e.ok("heartbeat") // creates the store
	d := e.db()
	now := queue.FormatTime(time.Now())
	opsExec(t, d, `INSERT INTO queues (name, created_at, updated_at) VALUES ('runs', ?, ?)`, now, now)
	opsExec(t, d, `INSERT INTO tasks (id, state, queue, priority, spec, created_at, updated_at, finished_at)
		VALUES ('carrier', 'done', 'runs', 2, '{}', ?, ?, ?)`, now, now, now)
	return &opsFixture{t: t, d: d}
}

func (f *opsFixture) runs(n int, state string, endedAgo, dur time.Duration) {
	f.t.Helper()
	for range n {
		f.attempt++
		end := time.Now().Add(-endedAgo)
		opsExec(f.t, f.d, `INSERT INTO runs (id, task_id, attempt, state, queue, created_at, started_at, ended_at)
			VALUES (?, 'carrier', ?, ?, 'runs', ?, ?, ?)`, fmt.Sprintf("run-%d", f.attempt), f.attempt, state,
			queue.FormatTime(end.Add(-dur)), queue.FormatTime(end.Add(-dur)), queue.FormatTime(end))
	}
}

func (f *opsFixture) tasks(n int, state, q, reason string) {
	f.t.Helper()
	now := queue.FormatTime(time.Now())
	opsExec(f.t, f.d, `INSERT INTO queues (name, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, q, now, now)
	for range n {
		f.n++
		var br, todoAt any
		if reason != "" {
			br = reason
		}
		if state == queue.TaskTodo {
			todoAt = now
		}
		opsExec(f.t, f.d, `INSERT INTO tasks (id, state, queue, priority, spec, blocked_reason, todo_at, lane_head, seq, created_at, updated_at)
			VALUES (?, ?, ?, 2, '{}', ?, ?, 1, ?, ?, ?)`, fmt.Sprintf("fx-%d", f.n), state, q, br, todoAt, 100000+f.n, now, now)
	}
}

func (f *opsFixture) heartbeatAge(age time.Duration) {
	f.t.Helper()
	opsExec(f.t, f.d, `UPDATE system_state SET value = ? WHERE key = 'last_heartbeat'`, queue.FormatTime(time.Now().Add(-age)))
}

// TestOpsHealthThresholdFlags: each threshold flag of cq health moves its
// boundary, and the exit code follows the verdict (0, 1, 2).
func TestOpsHealthThresholdFlags(t *testing.T) {
	e := opsNewEnv(t)
	f := opsNewFixture(t, e)
	f.runs(9, queue.RunSucceeded, time.Minute, time.Second)
	f.runs(1, queue.RunFailed, time.Minute, time.Second) // 90 %, one failure
	f.runs(10, queue.RunFailed, 2*time.Hour, time.Second)
	f.tasks(4, queue.TaskTodo, "default", "")
	f.tasks(2, queue.TaskBlocked, "default", queue.BlockedRetry)
	f.heartbeatAge(2 * time.Minute)
	// The baseline: 1h window (the older failures out), success at 90 %
	// above --success-degraded 0.85.
	base := []string{"health", "--window", "1h", "--success-degraded", "0.85", "--success-unhealthy", "0.5"}
	cases := []struct {
		name  string
		flags []string
		want  int
	}{
		{"baseline", nil, 0},
		{"default thresholds: 90% is degraded", []string{"--success-degraded", "0.95", "--success-unhealthy", "0.8"}, 1},
		{"success-degraded 0.90", []string{"--success-degraded", "0.90"}, 1},
		{"success-unhealthy 0.91", []string{"--success-degraded", "0.95", "--success-unhealthy", "0.91"}, 2},
		{"success-unhealthy 0.90", []string{"--success-degraded", "0.95", "--success-unhealthy", "0.90"}, 1},
		{"backlog-degraded 4", []string{"--backlog-degraded", "4"}, 1},
		{"backlog-degraded 5", []string{"--backlog-degraded", "5"}, 0},
		{"backlog-unhealthy 3", []string{"--backlog-degraded", "2", "--backlog-unhealthy", "3"}, 2},
		{"backlog-unhealthy 4", []string{"--backlog-degraded", "2", "--backlog-unhealthy", "4"}, 1},
		{"blocked-degraded 2", []string{"--blocked-degraded", "2"}, 1},
		{"blocked-degraded 3", []string{"--blocked-degraded", "3"}, 0},
		{"blocked-unhealthy 1", []string{"--blocked-degraded", "1", "--blocked-unhealthy", "1"}, 2},
		{"blocked-unhealthy 2", []string{"--blocked-degraded", "1", "--blocked-unhealthy", "2"}, 1},
		{"failed-degraded 1", []string{"--failed-degraded", "1"}, 1},
		{"failed-degraded 2", []string{"--failed-degraded", "2"}, 0},
		{"heartbeat-max-age 1m", []string{"--heartbeat-max-age", "1m"}, 2},
		{"heartbeat-max-age 1h", []string{"--heartbeat-max-age", "1h"}, 0},
		{"window 24h counts the older failures", []string{"--window", "24h"}, 2},
	}
	for _, c := range cases {
		out := e.code(c.want, append(append(append([]string{}, base...), c.flags...), "-o", "json")...)
		var h struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, out)
			continue
		}
		if want := []string{"ok", "degraded", "unhealthy"}[c.want]; h.Status != want {
			t.Errorf("%s: status %s, want %s", c.name, h.Status, want)
		}
	}
	// Thresholds that make no sense are refused (exit 1).
	for _, bad := range [][]string{
		{"--window", "0s"},
		{"--window", "abc"},
		{"--heartbeat-max-age", "soon"},
		{"--backlog-degraded", "60"},
		{"--blocked-degraded", "11", "--blocked-unhealthy", "10"},
		{"--success-unhealthy", "0.99"},
		{"--backlog-degraded", "x"},
	} {
		out, errs, code := e.run(append([]string{"health"}, bad...)...)
		if code != 1 || out != "" || errs == "" {
			t.Errorf("cq health %s: exit %d, stdout %q, stderr %q; want 1, nothing, a message", strings.Join(bad, " "), code, out, errs)
		}
	}
}

// opsParseProm parses Prometheus text with the Prometheus project's own
// parser.
func opsParseProm(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("cq health -o prometheus does not parse: %v\n%s", err, text)
	}
	return mfs
}

// opsSeries returns a family's values by the value of label (or "" for
// an unlabelled gauge).
func opsSeries(t *testing.T, mfs map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Errorf("no family %s", name)
		return nil
	}
	if mf.GetType() != dto.MetricType_GAUGE {
		t.Errorf("%s is a %s, want a gauge", name, mf.GetType())
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			} else {
				t.Errorf("%s has an unexpected label %s", name, lp.GetName())
			}
		}
		if label != "" && key == "" {
			t.Errorf("%s: a series without the label %s", name, label)
		}
		if m.GetGauge() == nil {
			t.Errorf("%s: a series without a gauge value", name)
			continue
		}
		out[key] = m.GetGauge().GetValue()
	}
	return out
}

func opsWantSeries(t *testing.T, name string, got, want map[string]float64) {
	t.Helper()
	opsWantSeriesNear(t, name, got, want, 1e-9)
}

// opsWantSeriesNear compares within tol (SQLite's julianday arithmetic
// makes durations exact to about 1e-5 s only).
func opsWantSeriesNear(t *testing.T, name string, got, want map[string]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", name, got, want)
		return
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || math.Abs(g-v) > tol {
			t.Errorf("%s = %v, want %v", name, got, want)
			return
		}
	}
}

// opsLintProm checks the text as promtool check metrics would, and that
// every family has its HELP and TYPE lines.
func opsLintProm(t *testing.T, text string, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	help, typ := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "#" && f[1] == "HELP" {
			help[f[2]] = true
		}
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			typ[f[2]] = true
		}
	}
	for name, mf := range mfs {
		if !help[name] || mf.GetHelp() == "" {
			t.Errorf("family %s has no HELP", name)
		}
		if !typ[name] || mf.GetType() == dto.MetricType_UNTYPED {
			t.Errorf("family %s has no TYPE", name)
		}
	}
}

// TestOpsHealthPrometheus parses cq health -o prometheus back with the
// Prometheus parser, checks each family against known figures, and lints
// it; it exits 0 even when the verdict is unhealthy.
func TestOpsHealthPrometheus(t *testing.T) {
	e := opsNewEnv(t)
	f := opsNewFixture(t, e)
	e.ok("enqueue", "--id", "a1", "--", "true")
	e.ok("enqueue", "--id", "a2", "--", "true")
	e.ok("enqueue", "--id", "b1", "--queue", "batch", "--", "true")
	e.ok("enqueue", "--id", "h1", "--hold", "--", "true")
	e.ok("queue", "pause", "batch")
	// One live run in queue default (a doing task).
	now := queue.FormatTime(time.Now())
	opsExec(t, f.d, `INSERT INTO tasks (id, state, queue, priority, spec, created_at, updated_at)
		VALUES ('busy', 'doing', 'default', 2, '{}', ?, ?)`, now, now)
	opsExec(t, f.d, `INSERT INTO runs (id, task_id, attempt, state, queue, created_at, started_at, lease_expires_at)
		VALUES ('live-run', 'busy', 1, 'running', 'default', ?, ?, ?)`, now, now, queue.FormatTime(time.Now().Add(time.Hour)))
	f.runs(16, queue.RunSucceeded, time.Minute, 10*time.Second)
	f.runs(2, queue.RunFailed, time.Minute, 20*time.Second)
	f.runs(2, queue.RunTimeout, time.Minute, 30*time.Second)
	f.runs(1, queue.RunCancelled, time.Minute, 40*time.Second)
	f.runs(7, queue.RunFailed, 3*24*time.Hour, time.Second) // outside the window
	hb := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	opsExec(t, f.d, `UPDATE system_state SET value = ? WHERE key = 'last_heartbeat'`, queue.FormatTime(hb))

	// 16 of 20 = 80 %, 4 failed: degraded.
	e.code(1, "health")
	text := e.ok("health", "-o", "prometheus")
	mfs := opsParseProm(t, text)
	opsLintProm(t, text, mfs)
	opsWantSeries(t, "cq_tasks", opsSeries(t, mfs, "cq_tasks", "state"), map[string]float64{
		"inbox": 0, "todo": 3, "blocked": 1, "doing": 1, "done": 1, "failed": 0, "cancelled": 0})
	opsWantSeries(t, "cq_queue_backlog", opsSeries(t, mfs, "cq_queue_backlog", "queue"), map[string]float64{
		"default": 2, "batch": 1, "runs": 0})
	opsWantSeries(t, "cq_queue_running", opsSeries(t, mfs, "cq_queue_running", "queue"), map[string]float64{
		"default": 1, "batch": 0, "runs": 0})
	opsWantSeries(t, "cq_runs_finished", opsSeries(t, mfs, "cq_runs_finished", "state"), map[string]float64{
		"succeeded": 16, "failed": 2, "timeout": 2, "cancelled": 1})
	opsWantSeries(t, "cq_success_ratio", opsSeries(t, mfs, "cq_success_ratio", ""), map[string]float64{"": 0.8})
	// (16·10 + 2·20 + 2·30 + 40) / 21 runs.
	opsWantSeriesNear(t, "cq_run_duration_seconds", opsSeries(t, mfs, "cq_run_duration_seconds", ""), map[string]float64{"": 300.0 / 21}, 1e-3)
	opsWantSeries(t, "cq_last_heartbeat_timestamp_seconds", opsSeries(t, mfs, "cq_last_heartbeat_timestamp_seconds", ""),
		map[string]float64{"": float64(hb.UnixMilli()) / 1000})
	opsWantSeries(t, "cq_health_status", opsSeries(t, mfs, "cq_health_status", ""), map[string]float64{"": 1})
	opsWantSeries(t, "cq_store_readable", opsSeries(t, mfs, "cq_store_readable", ""), map[string]float64{"": 1})

	// Unhealthy (no heartbeat for an hour): the verdict is in the metrics,
	// the exit code is still 0.
	opsExec(t, f.d, `UPDATE system_state SET value = ? WHERE key = 'last_heartbeat'`, queue.FormatTime(time.Now().Add(-time.Hour)))
	e.code(2, "health")
	text = e.ok("health", "-o", "prometheus")
	mfs = opsParseProm(t, text)
	opsLintProm(t, text, mfs)
	opsWantSeries(t, "cq_health_status", opsSeries(t, mfs, "cq_health_status", ""), map[string]float64{"": 2})

	// The oldest waiting task and the wait warnings are metrics too.
	waited := time.Now().Add(-2 * time.Hour)
	opsExec(t, f.d, `UPDATE tasks SET todo_at = ?, warned = 1 WHERE id = 'a1'`, queue.FormatTime(waited))
	text = e.ok("health", "-o", "prometheus")
	mfs = opsParseProm(t, text)
	opsLintProm(t, text, mfs)
	opsWantSeriesNear(t, "cq_oldest_waiting_seconds", opsSeries(t, mfs, "cq_oldest_waiting_seconds", ""), map[string]float64{"": 7200}, 60)
	opsWantSeries(t, "cq_waiting_warned", opsSeries(t, mfs, "cq_waiting_warned", ""), map[string]float64{"": 1})
	if w := opsSeries(t, mfs, "cq_warnings", "")[""]; w < 1 {
		t.Errorf("cq_warnings = %v with a task past its warn-after, want at least 1", w)
	}

	// A new home (never a heartbeat, nothing finished) lints clean too.
	e2 := opsNewEnv(t)
	text = e2.ok("health", "-o", "prometheus")
	mfs = opsParseProm(t, text)
	opsLintProm(t, text, mfs)
	opsWantSeries(t, "cq_health_status", opsSeries(t, mfs, "cq_health_status", ""), map[string]float64{"": 2})
	opsWantSeries(t, "cq_last_heartbeat_timestamp_seconds", opsSeries(t, mfs, "cq_last_heartbeat_timestamp_seconds", ""), map[string]float64{"": 0})
	opsWantSeries(t, "cq_oldest_waiting_seconds", opsSeries(t, mfs, "cq_oldest_waiting_seconds", ""), map[string]float64{"": 0})
	opsWantSeries(t, "cq_waiting_warned", opsSeries(t, mfs, "cq_waiting_warned", ""), map[string]float64{"": 0})
}

// opsCheckEvents checks the event log: each task's and each run's events
// form a path through its state machine (every change allowed, each
// starting where the previous one ended: so no task is promoted twice for
// one retry), a run has at most one terminal event, and no run is reaped
// after it ended.
func opsCheckEvents(t opsReporter, evs []cqEvent) {
	t.Helper()
	taskAt, runAt := map[string]string{}, map[string]string{}
	prev := int64(0)
	for _, ev := range evs {
		if ev.Seq <= prev {
			t.Errorf("event seq %d after %d", ev.Seq, prev)
		}
		prev = ev.Seq
		from, to, task, run := strOf(ev.From), strOf(ev.To), strOf(ev.TaskID), strOf(ev.RunID)
		switch {
		case strings.HasPrefix(ev.Kind, "run."):
			cur, seen := runAt[run]
			switch {
			case !seen && (from != "" || to != queue.RunQueued):
				t.Errorf("seq %d %s: run %s begins %q → %q", ev.Seq, ev.Kind, run, from, to)
			case seen && queue.RunTerminal(cur):
				t.Errorf("seq %d %s (%s): run %s of task %s changed after it ended %s", ev.Seq, ev.Kind, strOf(ev.Reason), run, task, cur)
			case seen && (from != cur || !queue.RunTransitionAllowed(from, to)):
				t.Errorf("seq %d %s: run %s %s → %s, but it was %s", ev.Seq, ev.Kind, run, from, to, cur)
			}
			runAt[run] = to
		case strings.HasPrefix(ev.Kind, "task."):
			cur, seen := taskAt[task]
			switch {
			case !seen && (ev.Kind != "task.created" || to != queue.TaskInbox):
				t.Errorf("seq %d %s: task %s does not begin with its creation", ev.Seq, ev.Kind, task)
			case seen && from != cur:
				t.Errorf("seq %d %s: task %s from %s, but it was %s", ev.Seq, ev.Kind, task, from, cur)
			case seen && from != to && !queue.TaskTransitionAllowed(from, to):
				t.Errorf("seq %d %s: task %s %s → %s is not allowed", ev.Seq, ev.Kind, task, from, to)
			case seen && queue.TaskTerminal(cur) && from == to:
				t.Errorf("seq %d %s: terminal task %s has a later event", ev.Seq, ev.Kind, task)
			}
			taskAt[task] = to
		}
	}
}

// opsReporter is the part of testing.T the checkers use.
type opsReporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// opsRecorder is an opsReporter that records failures.
type opsRecorder struct{ errs []string }

func (r *opsRecorder) Helper() {}
func (r *opsRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestOpsCheckEventsCatches shows the event checker can fail: each broken
// log below must be reported, the valid one must not.
func TestOpsCheckEventsCatches(t *testing.T) {
	s := func(v string) *string { return &v }
	ev := func(kind, task, run, from, to, reason string) cqEvent {
		e := cqEvent{Kind: kind, TaskID: s(task)}
		if run != "" {
			e.RunID = s(run)
		}
		if from != "" {
			e.From = s(from)
		}
		if to != "" {
			e.To = s(to)
		}
		if reason != "" {
			e.Reason = s(reason)
		}
		return e
	}
	valid := []cqEvent{
		ev("task.created", "t", "", "", "inbox", ""),
		ev("task.todo", "t", "", "inbox", "todo", ""),
		ev("task.doing", "t", "", "todo", "doing", ""),
		ev("run.queued", "t", "r1", "", "queued", ""),
		ev("run.running", "t", "r1", "queued", "running", ""),
		ev("run.failed", "t", "r1", "running", "failed", ""),
		ev("task.blocked", "t", "", "doing", "blocked", ""),
		ev("task.todo", "t", "", "blocked", "todo", "retry due"),
		ev("task.waiting", "t", "", "todo", "todo", ""),
		ev("task.doing", "t", "", "todo", "doing", ""),
		ev("run.queued", "t", "r2", "", "queued", ""),
		ev("run.running", "t", "r2", "queued", "running", ""),
		ev("run.succeeded", "t", "r2", "running", "succeeded", ""),
		ev("task.done", "t", "", "doing", "done", ""),
	}
	with := func(i int, extra ...cqEvent) []cqEvent {
		out := append([]cqEvent{}, valid[:i]...)
		out = append(out, extra...)
		return append(out, valid[i:]...)
	}
	cases := map[string][]cqEvent{
		"reaped after it succeeded": with(13, ev("run.failed", "t", "r2", "running", "failed", "lease_expired")),
		"two terminal events":       with(6, ev("run.cancelled", "t", "r1", "failed", "cancelled", "")),
		"promoted twice":            with(8, ev("task.todo", "t", "", "blocked", "todo", "retry due")),
		"illegal task transition":   with(2, ev("task.done", "t", "", "todo", "done", "")),
		"event after done":          append(append([]cqEvent{}, valid...), ev("task.waiting", "t", "", "done", "done", "")),
		"run not begun queued":      with(4, ev("run.running", "t", "r9", "queued", "running", "")),
	}
	for name, evs := range cases {
		for i := range evs {
			evs[i].Seq = int64(i + 1)
		}
		rec := &opsRecorder{}
		opsCheckEvents(rec, evs)
		if len(rec.errs) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
	for i := range valid {
		valid[i].Seq = int64(i + 1)
	}
	rec := &opsRecorder{}
	opsCheckEvents(rec, valid)
	if len(rec.errs) != 0 {
		t.Errorf("valid log reported: %q", rec.errs)
	}
}

// opsWorker is a cq worker process.
type opsWorker struct {
	cmd    *exec.Cmd
	id     string
	stderr syncBuffer
	done   chan struct{}
	err    error
}

func (e *opsEnv) startWorker(args ...string) *opsWorker {
	e.t.Helper()
	w := &opsWorker{done: make(chan struct{})}
	w.cmd = e.command(context.Background(), "", append([]string{"worker"}, args...)...)
	w.cmd.Stderr = &w.stderr
	if err := w.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	w.id = fmt.Sprintf("%s:%d", host, w.cmd.Process.Pid)
	go func() { w.err = w.cmd.Wait(); close(w.done) }()
	e.t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
	})
	return w
}

func (w *opsWorker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// TestOpsHeartbeatBesideWorkers runs cq heartbeat in a loop, as processes,
// while several cq worker processes (3 s leases) run tasks that succeed,
// fail, fail once and retry, and while two workers are SIGKILLed mid-run.
// Every heartbeat exits 0 silently; the lost runs are reaped lease_expired;
// no run is reaped after it ended, no run ends twice, and no task is
// promoted twice for one retry (docs/semantics.md, Retries and backoff; docs/operations.md,
// Heartbeat).
func TestOpsHeartbeatBesideWorkers(t *testing.T) {
	e := opsNewEnv(t)
	e.ok("queue", "set", "default", "--retries", "1", "--backoff", "200ms", "--transient-retries", "0")
	var batch strings.Builder
	var ids []string
	add := func(id, shell string) {
		fmt.Fprintf(&batch, `{"id":%q,"shell":%q}`+"\n", id, shell)
		ids = append(ids, id)
	}
	// Long tasks first (FIFO): every worker starts with one, so a kill
	// always finds a run going.
	for i := range 12 {
		add(fmt.Sprintf("long-%d", i), "sleep 1.5")
	}
	for i := range 8 {
		add(fmt.Sprintf("ok-%d", i), "sleep 0.2")
		add(fmt.Sprintf("once-%d", i), `[ "$CQ_ATTEMPT" -ge 2 ] || exit 1; sleep 0.1`)
		add(fmt.Sprintf("bad-%d", i), "sleep 0.1; exit 3")
	}

	// The heartbeat loop: cq heartbeat as cron would run it, back to back.
	stop := make(chan struct{})
	type hbRun struct {
		stdout, stderr string
		code           int
	}
	var hbMu sync.Mutex
	var hbRuns []hbRun
	var hbDone sync.WaitGroup
	hbDone.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			out, errs, code := e.run("heartbeat")
			hbMu.Lock()
			hbRuns = append(hbRuns, hbRun{out, errs, code})
			hbMu.Unlock()
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		hbDone.Wait()
	}()

	if out, errs, code := e.runIn(batch.String(), "enqueue", "--batch"); code != 0 || errs != "" {
		t.Fatalf("enqueue --batch: exit %d, stderr %q, stdout %q", code, errs, out)
	}
	if out, errs, code := e.runIn("", "ls", "-q", "--limit", "0"); code != 0 || strings.Count(out, "\n") != len(ids) {
		t.Fatalf("enqueue: %d tasks listed (exit %d, %s), want %d", strings.Count(out, "\n"), code, errs, len(ids))
	}

	d := e.db()
	// liveOf counts the worker's running runs of long tasks.
	liveOf := func(worker string) int {
		var n int
		if err := d.QueryRow(`SELECT COUNT(*) FROM runs WHERE worker = ? AND state = 'running' AND task_id LIKE 'long-%'`, worker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	workerArgs := []string{"--lease", "3s", "--concurrency", "2", "--grace", "2s"}
	workers := []*opsWorker{e.startWorker(workerArgs...), e.startWorker(workerArgs...), e.startWorker(workerArgs...)}

	// SIGKILL two workers, each once it has a run going; a replacement
	// takes over after each.
	var killed []*opsWorker
	for _, w := range workers[:2] {
		eventually(t, 40*time.Second, "worker "+w.id+" running a long task", func() (bool, string) {
			return liveOf(w.id) > 0 || w.exited(), w.stderr.String()
		})
		if w.exited() {
			t.Fatalf("worker %s exited: %v\n%s", w.id, w.err, w.stderr.String())
		}
		if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-w.done
		killed = append(killed, w)
		workers = append(workers, e.startWorker(workerArgs...))
	}
	var lost []string
	for _, w := range killed {
		rows, err := d.Query(`SELECT id FROM runs WHERE worker = ? AND state IN ('queued','running','cancelling')`, w.id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			lost = append(lost, id)
		}
		rows.Close()
	}
	if len(lost) == 0 {
		t.Fatal("the killed workers left no live run behind")
	}

	// Everything ends: the lost runs are reaped by the heartbeats.
	eventually(t, 45*time.Second, "every task terminal", func() (bool, string) {
		hbMu.Lock()
		for i, r := range hbRuns {
			if r.code != 0 {
				hbMu.Unlock()
				t.Fatalf("heartbeat %d failed: exit %d, stderr %q", i, r.code, r.stderr)
			}
		}
		hbMu.Unlock()
		var n int
		if err := d.QueryRow(`SELECT COUNT(*) FROM tasks WHERE state NOT IN ('done','failed','cancelled')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0, fmt.Sprintf("%d tasks not terminal", n)
	})
	close(stop)
	hbDone.Wait()

	for _, w := range workers[2:] {
		if w.exited() {
			t.Errorf("worker %s exited early: %v\n%s", w.id, w.err, w.stderr.String())
			continue
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers[2:] {
		select {
		case <-w.done:
			if w.err != nil {
				t.Errorf("worker %s after SIGTERM: %v", w.id, w.err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s still running 30s after SIGTERM", w.id)
		}
	}

	hbMu.Lock()
	if len(hbRuns) < 3 {
		t.Errorf("only %d heartbeats ran beside the workers", len(hbRuns))
	}
	for i, r := range hbRuns {
		if r.code != 0 || r.stderr != "" || r.stdout != "" {
			t.Errorf("heartbeat %d: exit %d, stdout %q, stderr %q; want 0 and silence", i, r.code, r.stdout, r.stderr)
		}
	}
	hbMu.Unlock()

	for _, id := range lost {
		var state, reason string
		if err := d.QueryRow(`SELECT state, COALESCE(reason, '') FROM runs WHERE id = ?`, id).Scan(&state, &reason); err != nil {
			t.Fatal(err)
		}
		if reason != "lease_expired" || (state != queue.RunFailed && state != queue.RunCancelled) {
			var evs []string
			rows, err := d.Query(`SELECT seq || ' ' || at || ' ' || kind || ' ' || COALESCE(from_state,'') || '>' || COALESCE(to_state,'') || ' ' || COALESCE(reason,'') FROM events WHERE run_id = ? ORDER BY seq`, id)
			if err == nil {
				for rows.Next() {
					var line string
					_ = rows.Scan(&line)
					evs = append(evs, line)
				}
				rows.Close()
			}
			t.Errorf("run %s of a killed worker ended %s (%s), want failed, lease_expired; its events:\n%s",
				id, state, reason, strings.Join(evs, "\n"))
		}
	}

	evs := e.events()
	opsCheckEvents(t, evs)
	reaped := 0
	for _, ev := range evs {
		if strOf(ev.Reason) == "lease_expired" {
			reaped++
		}
	}
	t.Logf("%d tasks, %d runs lost with the killed workers, %d reaped in all, %d heartbeats, %d events",
		len(ids), len(lost), reaped, len(hbRuns), len(evs))
	promotions := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev.Kind, "task.") && strOf(ev.From) == queue.TaskBlocked && strOf(ev.To) == queue.TaskTodo {
			promotions++
		}
	}
	if promotions == 0 {
		t.Error("no task was promoted from a retry backoff: the scenario did not exercise promotion")
	}
	var started int
	if err := d.QueryRow(`SELECT COUNT(*) FROM runs`).Scan(&started); err != nil {
		t.Fatal(err)
	}
	if started < len(ids) {
		t.Errorf("%d runs for %d tasks", started, len(ids))
	}
}

// TestOpsWaitInterrupted: cq wait cut short by SIGINT exits 130, by
// SIGTERM 143 (as a shell reports a process killed by them), silently;
// the deadline stays 124.
func TestOpsWaitInterrupted(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	id := strings.TrimSpace(e.ok("enqueue", "--", "sleep", "100"))
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := e.command(ctx, "", "wait", id)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		// Signal only once cq has the store open: its handler is installed
		// before the command runs.
		deadline := time.Now().Add(30 * time.Second)
		for !opsHasOpen(cmd.Process.Pid, "cq.db") {
			if time.Now().After(deadline) {
				cancel()
				t.Fatal("cq wait never opened the store")
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = cmd.Process.Signal(c.sig)
		err := cmd.Wait()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.want || errb.Len() != 0 {
			t.Errorf("cq wait after %v: %v, stderr %q; want exit %d and nothing on stderr", c.sig, err, errb.String(), c.want)
		}
	}
	if _, _, code := e.run("wait", "--timeout", "0.1s", id); code != 124 {
		t.Errorf("cq wait --timeout: exit %d, want 124", code)
	}
}

// opsHasOpen reports whether process pid has a file named name open.
func opsHasOpen(pid int, name string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && filepath.Base(target) == name {
			return true
		}
	}
	return false
}

// TestMultiStopsWhenInterrupted: a per-id command cut short by a signal
// reports nothing and goes no further, so that execute exits 130 or 143
// silently (TestOpsWaitInterrupted lands here when the signal comes while
// cq wait looks its ids up).
func TestMultiStopsWhenInterrupted(t *testing.T) {
	var stderr bytes.Buffer
	var reached []string
	err := multi(&stderr, []string{"a", "b"}, func(id string) error {
		reached = append(reached, id)
		return fmt.Errorf("looking up %s: %w", id, context.Canceled)
	})
	if !errors.Is(err, context.Canceled) || stderr.Len() != 0 || len(reached) != 1 {
		t.Errorf("multi interrupted: err %v, stderr %q, reached %v; want context.Canceled, nothing printed, only a", err, stderr.String(), reached)
	}
}

// TestCommandWord: the command a command line names is found past the
// global flags and their values, so that only it is built; anything
// unclear builds the whole tree (""). Every command is built by name and
// listed in help.
func TestCommandWord(t *testing.T) {
	for line, want := range map[string]string{
		"enqueue -- true":                "enqueue",
		"--home h enqueue -- true":       "enqueue",
		"--home=h -q --db x.db ls":       "ls",
		"-o json show x":                 "show",
		"-ojson --output=jsonl queue ls": "queue",
		"--quiet wait x":                 "wait",
		"-qo json ls":                    "",
		"--bogus ls":                     "",
		"--home":                         "",
		"":                               "",
		"help enqueue":                   "help",
		"-- enqueue":                     "",
	} {
		if got := commandWord(strings.Fields(line)); got != want {
			t.Errorf("commandWord(%q) = %q, want %q", line, got, want)
		}
	}
	if len(commands) != len(commandOrder) {
		t.Errorf("%d commands built by name, %d listed", len(commands), len(commandOrder))
	}
	full := newRoot(&App{}, "")
	for _, name := range commandOrder {
		if commands[name] == nil {
			t.Errorf("%s is listed but not built by name", name)
		}
		c, _, err := full.Find([]string{name})
		if err != nil || c.Name() != name {
			t.Errorf("the whole tree has no %s: %v", name, err)
		}
		if only := newRoot(&App{}, name); len(only.Commands()) != 1 || only.Commands()[0].Name() != name {
			t.Errorf("a %s command line builds %d commands", name, len(only.Commands()))
		}
	}
}

// TestWaitOutlivesCleanup: a task that cq cleanup deletes while cq wait
// looks (it had finished) counts as it was last seen, not as an unknown
// id (exit 4); one deleted before cq wait saw it finish counts against
// the wait, named on stderr.
func TestWaitOutlivesCleanup(t *testing.T) {
	tasks := map[string]queue.TaskStatus{
		"a": {State: queue.TaskDone},
		"b": {State: queue.TaskTodo},
		"c": {State: queue.TaskTodo},
	}
	w := waiter{states: fakeStates(tasks, nil)}
	ids := []string{"a", "b", "c"}
	if pending, bad, err := w.look(ids); err != nil || pending != 2 || len(bad) != 0 {
		t.Fatalf("first look: %d pending, %v, %v; want 2, none", pending, bad, err)
	}
	// cleanup deletes a (done, seen) and c (seen only in todo); b ends.
	delete(tasks, "a")
	delete(tasks, "c")
	tasks["b"] = queue.TaskStatus{State: queue.TaskDone}
	pending, bad, err := w.look(ids)
	if err != nil || pending != 0 || len(bad) != 1 || !strings.Contains(bad[0], "task c was deleted") {
		t.Errorf("after the cleanup: %d pending, %q, %v; want 0, only c named", pending, bad, err)
	}
}

// fakeStates answers waiter's reads from tasks, counting in asked how
// many ids each read asked about.
func fakeStates(tasks map[string]queue.TaskStatus, asked *[]int) func([]string) (map[string]queue.TaskStatus, error) {
	return func(ids []string) (map[string]queue.TaskStatus, error) {
		if asked != nil {
			*asked = append(*asked, len(ids))
		}
		out := map[string]queue.TaskStatus{}
		for _, id := range ids {
			if st, ok := tasks[id]; ok {
				out[id] = st
			}
		}
		return out, nil
	}
}

// TestWaitReadsOnlyUnfinished: each look reads the tasks not yet seen
// finished; once none is left it reads them all again, and a task that
// went back meanwhile (cq retry of a failed one) keeps the wait going.
func TestWaitReadsOnlyUnfinished(t *testing.T) {
	reason := "exit code 1"
	tasks := map[string]queue.TaskStatus{
		"a": {State: queue.TaskFailed, Reason: &reason},
		"b": {State: queue.TaskDoing},
		"c": {State: queue.TaskDone},
	}
	var asked []int
	w := waiter{states: fakeStates(tasks, &asked)}
	ids := []string{"a", "b", "c"}
	if pending, _, _ := w.look(ids); pending != 1 {
		t.Fatalf("first look: %d pending, want 1", pending)
	}
	if pending, _, _ := w.look(ids); pending != 1 || asked[1] != 1 {
		t.Fatalf("second look: %d pending, read %v; want 1 pending and only b read", pending, asked)
	}
	// a is retried, then b ends: the confirming read finds a back in todo.
	tasks["a"] = queue.TaskStatus{State: queue.TaskTodo}
	tasks["b"] = queue.TaskStatus{State: queue.TaskDone}
	if pending, bad, _ := w.look(ids); pending != 1 || len(bad) != 0 {
		t.Fatalf("after a's retry: %d pending, %q; want a pending again", pending, bad)
	}
	tasks["a"] = queue.TaskStatus{State: queue.TaskFailed, Reason: &reason}
	pending, bad, err := w.look(ids)
	if err != nil || pending != 0 || len(bad) != 1 || bad[0] != "task a ended failed (exit code 1)" {
		t.Fatalf("at the end: %d pending, %q, %v; want a named as failed", pending, bad, err)
	}
	if want := []int{3, 1, 1, 3, 1, 3}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("reads asked about %v ids, want %v", asked, want)
	}
}

// TestFollowEndsWhenItsReaderGoes: cq events --follow, waiting with
// nothing to write, notices that the pipe it writes to has lost its
// reader and exits as a write to it would have (141, silently), instead
// of lingering until the next event. (cq logs --follow shares the check.)
func TestFollowEndsWhenItsReaderGoes(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	e.ok("enqueue", "--", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.command(ctx, "", "events", "--since", "0", "--follow")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Both events read (created, todo): the follow waits for more.
	br := bufio.NewReader(r)
	for i := 0; i < 2; i++ {
		if _, err := br.ReadString('\n'); err != nil {
			t.Errorf("event %d not read: %v", i+1, err)
		}
	}
	r.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 141 || errb.Len() != 0 {
		t.Errorf("cq events --follow after its reader went: %v, stderr %q; want exit 141 and nothing on stderr", err, errb.String())
	}
}

// TestOnceEndsOnAStoreItCannotWrite: cq worker --once against a store it
// can read but not write (made immutable here, which binds root too)
// exits 1 at start saying so, with the store's path, instead of retrying
// its claim for ever.
func TestOnceEndsOnAStoreItCannotWrite(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	e.ok("enqueue", "--", "true")
	path := filepath.Join(e.home, "cq.db")
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("cannot make the store immutable here (chattr +i): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
	_, errs, code := e.run("worker", "--once")
	if code != 1 || !strings.Contains(errs, "cq: the store "+path+" is read-only: ") {
		t.Errorf("cq worker --once on a read-only store: exit %d, stderr %q; want 1 and the error", code, errs)
	}
	// Reading still works.
	e.code(0, "ls", "-q")
}

// TestRefusedSpoolAppendLeavesNoPart: an append the file system refuses
// part-way (here past RLIMIT_FSIZE, as a full disk would) exits 1 and
// takes back what it wrote of the line, which the next drain would
// otherwise reject as a crashed append's leftover.
func TestRefusedSpoolAppendLeavesNoPart(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	e.ok("enqueue", "--spool", "--id", "first", "--", "true")
	spoolFile := filepath.Join(e.home, "queue.jsonl")
	before, err := os.ReadFile(spoolFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := strings.Repeat("x", 2000)
	cmd := exec.CommandContext(ctx, "bash", "-c", `ulimit -f 1 && exec cq enqueue --spool --id second -- echo "$0"`, long)
	cmd.Env, cmd.Dir = e.env, e.dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "file too large") {
		t.Fatalf("append past the file size limit: %v %q; want exit 1 naming the error", err, out)
	}
	if after, _ := os.ReadFile(spoolFile); string(after) != string(before) {
		t.Errorf("the spool after a refused append holds %d bytes, want its %d from before", len(after), len(before))
	}
	e.code(0, "ls", "-q")
	if _, err := os.Stat(filepath.Join(e.home, "queue.rejected.jsonl")); err == nil {
		t.Error("the drain rejected a line: the refused append left part of it")
	}
}

// TestBatchOnAFullDiskBlamesNoLine: a batch the store cannot take (its
// WAL past RLIMIT_FSIZE, as on a full disk) exits 1 with the store's
// error, not charged to a line whose spec is fine, and stores nothing.
func TestBatchOnAFullDiskBlamesNoLine(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	e.ok("enqueue", "--id", "before", "--", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", `ulimit -f 2000 && exec cq enqueue --batch`)
	cmd.Env, cmd.Dir = e.env, e.dir
	cmd.Stdin = strings.NewReader(strings.Repeat(`{"cmd":["true"]}`+"\n", 40000))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Contains(string(out), "line ") || !strings.Contains(string(out), "file too large") {
		t.Fatalf("a batch past the file size limit: %v %q; want exit 1 and the store's error, no line named", err, out)
	}
	if got := strings.Fields(e.ok("ls", "-q", "--limit", "0")); len(got) != 1 || got[0] != "before" {
		t.Errorf("after the refused batch the store holds %v, want only before", got)
	}
}

// TestWorkerRecoversWhenTheStoreIsWritableAgain: a worker whose store
// becomes unwritable while it runs (its files made immutable here; a full
// disk or a permission change alike) logs the refused writes and retries
// them, and runs the waiting task once the store is writable again.
func TestWorkerRecoversWhenTheStoreIsWritableAgain(t *testing.T) {
	t.Parallel()
	e := opsNewEnv(t)
	// Due once the worker runs and its files are immutable; the claim
	// that takes it is the write refused.
	id := strings.TrimSpace(e.ok("enqueue", "--delay", "4s", "--", "true"))
	path := filepath.Join(e.home, "cq.db")
	files := []string{path, path + "-wal"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "", "worker")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started, refused := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		seenStart, seenRefusal := false, false
		for sc.Scan() {
			if !seenStart && strings.Contains(sc.Text(), `"worker.started"`) {
				seenStart = true
				close(started)
			}
			if seenStart && !seenRefusal && strings.Contains(sc.Text(), `"store.error"`) && strings.Contains(sc.Text(), "is read-only") {
				seenRefusal = true
				close(refused)
			}
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the worker never started")
	}
	for _, f := range files {
		if out, err := exec.Command("chattr", "+i", f).CombinedOutput(); err != nil {
			t.Skipf("cannot make the store immutable here (chattr +i): %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", f).Run() })
	}
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("the worker never reported a refused write")
	}
	for _, f := range files {
		if out, err := exec.Command("chattr", "-i", f).CombinedOutput(); err != nil {
			t.Fatalf("chattr -i: %v %s", err, out)
		}
	}
	e.code(0, "wait", "--timeout", "30s", id)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

// TestReasonMustBeText: a --reason that is not UTF-8 is bad usage for
// every command that takes one, and changes nothing.
func TestReasonMustBeText(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, time.Minute, true)
	e.ok("enqueue", "--id", "r1", "--hold", "--", "true")
	for _, args := range [][]string{
		{"cancel", "r1"}, {"retry", "r1"}, {"hold", "r1"}, {"release", "r1"}, {"task", "set-state", "r1", "cancelled"},
	} {
		out, errs, code := e.run(append(args, "--reason", "bad\xff")...)
		if code != 1 || out != "" || errs != "cq: --reason is not valid UTF-8\n" {
			t.Errorf("%s --reason bad\\xff: exit %d, stdout %q, stderr %q; want exit 1 and one line", strings.Join(args, " "), code, out, errs)
		}
	}
	if got := strings.TrimSpace(e.ok("ls", "-q", "--state", "blocked")); got != "r1" {
		t.Fatalf("after the refusals, blocked tasks are %q; want r1 still held", got)
	}
	e.ok("release", "r1", "--reason", "fine, ünïcode")
}

// TestCancelOfAQueuedRunKillsItsProcess: a worker claimed the task,
// started its process and stalled before recording the start (the run is
// still queued). cq cancel ends the run and the task at once
// (docs/semantics.md, Cancel), so it kills that process on this host before its commit
// frees the key's lane; a run of another host is left to its own worker.
func TestCancelOfAQueuedRunKillsItsProcess(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, time.Minute, true)
	e.ok("enqueue", "--id", "here", "--key", "K", "--", "true")
	e.ok("enqueue", "--id", "there", "--", "true")
	ctx := context.Background()
	d, err := sqlite.Open(ctx, filepath.Join(e.home, "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st := queue.New(d.Store())
	host, _ := os.Hostname()
	start := func(h string) (*queue.Claimed, chan error) {
		cs, err := st.ClaimN(ctx, queue.ClaimParams{Worker: "stalled", Host: h, Lease: time.Minute}, 1)
		if err != nil || len(cs) != 1 {
			t.Fatalf("claim: %v, %d claimed", err, len(cs))
		}
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), "CQ_RUN_ID="+cs[0].RunID)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cs[0], done
	}
	c1, doneHere := start(host)
	c2, doneThere := start("another-host")
	if c1.TaskID != "here" || c2.TaskID != "there" {
		t.Fatalf("claimed %s then %s; want here then there", c1.TaskID, c2.TaskID)
	}
	e.ok("cancel", "here", "there")
	select {
	case err := <-doneHere:
		if err == nil {
			t.Fatal("sleep 300 ended on its own; want it killed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cq cancel left running the process of a run it cancelled before its start was recorded")
	}
	select {
	case err := <-doneThere:
		t.Fatalf("cq cancel killed the process of another host's run (%v)", err)
	default:
	}
	if got := strings.Fields(e.ok("ls", "-q", "--state", "cancelled")); len(got) != 2 {
		t.Fatalf("cancelled tasks: %v; want here and there", got)
	}
}

// TestWaitNamesAFailureOnOneLine: cq wait names each task that did not
// end done on one stderr line, even when its reason (given by a user)
// holds line breaks.
func TestWaitNamesAFailureOnOneLine(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, time.Minute, true)
	e.ok("enqueue", "--id", "w1", "--hold", "--", "true")
	e.ok("task", "set-state", "w1", "cancelled", "--reason", "line1\nline2\r\nline3")
	out, errs, code := e.run("wait", "w1")
	if code != 1 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "line1 line2 line3") {
		t.Errorf("wait: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the reason", code, out, errs)
	}
}

// TestEnqueueOutputFailureSaysTheTaskIsStored: when the id cannot be
// written (stdout on a full disk), cq enqueue exits 1 and says the task
// is stored all the same, so that a script does not enqueue it again.
func TestEnqueueOutputFailureSaysTheTaskIsStored(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, time.Minute, true)
	code, errs := e.runIntoFullDisk("enqueue", "--id", "kept", "--", "true")
	if code != 1 || errs != "cq: task kept is stored, but the output could not be written: write /dev/stdout: no space left on device\n" {
		t.Errorf("enqueue into /dev/full: exit %d, stderr %q; want exit 1 saying the task is stored", code, errs)
	}
	if got := strings.TrimSpace(e.ok("ls", "-q")); got != "kept" {
		t.Errorf("tasks after it: %q, want kept", got)
	}
}

// TestHealthOutputFailureIsUnknown: cq health that cannot write its
// verdict exits 3 (unknown, the Nagios convention), never 1, which
// would read as degraded.
func TestHealthOutputFailureIsUnknown(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, time.Minute, true)
	e.ok("heartbeat")
	for _, args := range [][]string{{"health"}, {"health", "-o", "json"}, {"health", "-q"}, {"health", "-o", "prometheus"}} {
		code, errs := e.runIntoFullDisk(args...)
		if code != 3 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no space left on device") {
			t.Errorf("%s into /dev/full: exit %d, stderr %q; want exit 3 and one line", strings.Join(args, " "), code, errs)
		}
	}
}

// runIntoFullDisk runs cq with its stdout on /dev/full (Linux's always
// full device, as a full disk) and returns its exit code and stderr.
func (e *cqEnv) runIntoFullDisk(args ...string) (int, string) {
	e.t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer full.Close()
	cmd := e.command(context.Background(), "", args...)
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = full, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), errb.String()
	}
	e.t.Fatalf("cq %s: %v", strings.Join(args, " "), err)
	return -1, ""
}

// TestOpsHealthPrometheusUnreadable: a store cq health cannot read (here
// one written by a newer cq) exits 3 without -o prometheus; with it, the
// metrics say the verdict is unknown (cq_health_status 3,
// cq_store_readable 0 with the reason in its help text) and it exits 0,
// silent on stderr, so a textfile collector's file does not go stale.
// The store is left untouched.
func TestOpsHealthPrometheusUnreadable(t *testing.T) {
	e := opsNewEnv(t)
	e.ok("heartbeat")
	opsExec(t, e.db(), `PRAGMA user_version = 99`)
	_, errs, code := e.run("health")
	if code != 3 || strings.Count(errs, "\n") != 1 {
		t.Fatalf("cq health of a newer store: exit %d, stderr %q; want 3 and one line", code, errs)
	}
	text, errs, code := e.run("health", "-o", "prometheus")
	if code != 0 || errs != "" {
		t.Fatalf("cq health -o prometheus of a newer store: exit %d, stderr %q; want 0 and nothing", code, errs)
	}
	mfs := opsParseProm(t, text)
	opsLintProm(t, text, mfs)
	opsWantSeries(t, "cq_health_status", opsSeries(t, mfs, "cq_health_status", ""), map[string]float64{"": 3})
	opsWantSeries(t, "cq_store_readable", opsSeries(t, mfs, "cq_store_readable", ""), map[string]float64{"": 0})
	if help := mfs["cq_store_readable"].GetHelp(); !strings.Contains(help, "newer") {
		t.Errorf("cq_store_readable's help %q does not give the reason", help)
	}
	var v int
	if err := e.db().QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != 99 {
		t.Errorf("user_version after cq health: %d (%v); want 99, untouched", v, err)
	}
}
