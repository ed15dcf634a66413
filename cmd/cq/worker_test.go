package main

// The worker proven with real processes (docs/semantics.md).
//
// TestWorkerScripts runs testdata/worker/*.txtar: one background or
// foreground cq worker per script, the CLI around it. The Go tests below
// start several cq worker processes on one CQ_HOME (TestMain puts this
// test binary in $PATH as cq) and stop them with signals.
//
// Nothing here sleeps to fix a race: every wait is a poll on a condition
// with a deadline, generous because the machine may be small and loaded
// and every cq process is built with -race.
//
// The scripts use the custom commands of script_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestWorkerScripts(t *testing.T) {
	p := wkScriptParams(t)
	p.Dir = filepath.Join("testdata", "worker")
	testscript.Run(t, p)
}

// wkScriptParams are the scripts' set-up and custom commands, with a
// deadline that leaves the test time to report a script that hangs.
func wkScriptParams(t *testing.T) testscript.Params {
	deadline := time.Now().Add(240 * time.Second)
	if d, ok := t.Deadline(); ok && d.Add(-15*time.Second).Before(deadline) {
		deadline = d.Add(-15 * time.Second)
	}
	p := scriptParams(nil)
	p.Deadline = deadline
	return p
}

// ---- processes ----

// wkRunProcs lists the live processes (zombies excluded) whose
// environment holds CQ_RUN_ID=runID.
func wkRunProcs(runID string) []int {
	want := []byte("CQ_RUN_ID=" + runID)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:]); len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X') {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// wkProcsReached reports whether at least n processes of the run live
// (for n = 0: none), and describes those that do.
func wkProcsReached(runID string, n int) (bool, string) {
	pids := wkRunProcs(runID)
	if n == 0 {
		return len(pids) == 0, wkDescribeProcs(pids)
	}
	return len(pids) >= n, wkDescribeProcs(pids)
}

func wkDescribeProcs(pids []int) string {
	if len(pids) == 0 {
		return "no process"
	}
	var parts []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		parts = append(parts, fmt.Sprintf("%d %q", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
	}
	return strings.Join(parts, "; ")
}

// ---- Go tests: an environment of cq processes on one home ----

// wkEnv runs cq processes on one CQ_HOME; a cq command that cannot run
// or takes more than 90 s fails the test.
type wkEnv struct{ *cqEnv }

// wkNewEnv's processes use the backend $CQ_TEST_DB chooses (testDB).
func wkNewEnv(t *testing.T) *wkEnv {
	t.Helper()
	return &wkEnv{newBackendEnv(t, 90*time.Second, true)}
}

// wkNewSQLiteEnv is wkNewEnv on SQLite, for a test that reaches into the
// database file; it is skipped when $CQ_TEST_DB chooses another backend
// (it runs in the SQLite half of make test).
func wkNewSQLiteEnv(t *testing.T) *wkEnv {
	t.Helper()
	if db := os.Getenv("CQ_TEST_DB"); db != "" && db != "sqlite" {
		t.Skipf("reaches into SQLite's file; $CQ_TEST_DB chooses %s", db)
	}
	return &wkEnv{newCQEnv(t, 90*time.Second, true)}
}

// wkRun and wkTask are the parts of cq show -o json the tests read.
type wkRun struct {
	ID        string  `json:"id"`
	TaskID    string  `json:"task_id"`
	Attempt   int     `json:"attempt"`
	State     string  `json:"state"`
	ExitCode  *int    `json:"exit_code"`
	Signal    *string `json:"signal"`
	Worker    *string `json:"worker"`
	StartedAt *string `json:"started_at"`
	EndedAt   *string `json:"ended_at"`
	Error     *string `json:"error"`
	Reason    *string `json:"reason"`
}

type wkTask struct {
	ID            string  `json:"id"`
	State         string  `json:"state"`
	Queue         string  `json:"queue"`
	Priority      string  `json:"priority"`
	Attempts      int     `json:"attempts"`
	BlockedReason *string `json:"blocked_reason"`
	NotBefore     *string `json:"not_before"`
	Reason        *string `json:"reason"`
	Runs          []wkRun `json:"runs"`
}

func (r wkRun) String() string {
	exit := "null"
	if r.ExitCode != nil {
		exit = strconv.Itoa(*r.ExitCode)
	}
	return fmt.Sprintf("{run %s attempt %d %s exit=%s signal=%s worker=%s reason=%s error=%s}",
		r.ID, r.Attempt, r.State, exit, nullStr(r.Signal), nullStr(r.Worker), nullStr(r.Reason), nullStr(r.Error))
}

func (t wkTask) String() string {
	return fmt.Sprintf("{task %s %s attempts=%d blocked_reason=%s not_before=%s reason=%s runs=%v}",
		t.ID, t.State, t.Attempts, nullStr(t.BlockedReason), nullStr(t.NotBefore), nullStr(t.Reason), t.Runs)
}

func (e *wkEnv) show(id string) wkTask {
	e.t.Helper()
	var task wkTask
	out := e.ok("show", "-o", "json", id)
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		e.t.Fatalf("cq show %s: %v\n%s", id, err, out)
	}
	return task
}

func (e *wkEnv) tasks() []wkTask {
	e.t.Helper()
	var all []wkTask
	out := e.ok("ls", "-o", "json", "--limit", "0")
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		e.t.Fatalf("cq ls: %v\n%s", err, out)
	}
	return all
}

// eventually polls cond until it holds; at the deadline the test fails
// with what cond last described.
func (e *wkEnv) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	eventually(e.t, timeout, what, cond)
}

// waitTask polls cq show until the task is in state.
func (e *wkEnv) waitTask(id, state string, timeout time.Duration) wkTask {
	e.t.Helper()
	var task wkTask
	e.eventually(timeout, "task "+id+" "+state, func() (bool, string) {
		task = e.show(id)
		return task.State == state, task.String()
	})
	return task
}

// waitRunning waits until the task's latest run is running, and returns it.
func (e *wkEnv) waitRunning(id string, attempt int) wkRun {
	e.t.Helper()
	var r wkRun
	e.eventually(30*time.Second, fmt.Sprintf("task %s run %d running", id, attempt), func() (bool, string) {
		task := e.show(id)
		if len(task.Runs) < attempt {
			return false, task.String()
		}
		r = task.Runs[attempt-1]
		return r.State == "running", r.String()
	})
	return r
}

// reapLater makes sure no process of the run outlives the test, should
// the worker under test leave one behind (they are this test's
// descendants, found by their CQ_RUN_ID).
func (e *wkEnv) reapLater(runID string) {
	e.t.Cleanup(func() {
		for _, pid := range wkRunProcs(runID) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// waitProcs waits until at least n processes of the run live, or none
// for n = 0.
func (e *wkEnv) waitProcs(runID string, n int, timeout time.Duration) {
	e.t.Helper()
	e.reapLater(runID)
	e.eventually(timeout, fmt.Sprintf("run %s with %d processes (0: none)", runID, n), func() (bool, string) {
		return wkProcsReached(runID, n)
	})
}

// waitFile waits until the file exists.
func (e *wkEnv) waitFile(name string) {
	e.t.Helper()
	e.eventually(30*time.Second, "file "+name, func() (bool, string) {
		_, err := os.Stat(e.path(name))
		return err == nil, fmt.Sprint(err)
	})
}

// wkWorker is one cq worker process.
type wkWorker struct {
	e      *wkEnv
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	code   int // valid once done is closed; -1: killed by a signal
}

// startWorker starts cq worker ARGS...; t.Cleanup stops it (SIGCONT,
// SIGTERM, then SIGKILL after 20 s) if the test has not.
func (e *wkEnv) startWorker(name string, args ...string) *wkWorker {
	e.t.Helper()
	return e.startWorkerArgv(name, append([]string{"cq", "worker"}, args...))
}

// startWorkerArgv is startWorker for a worker started by argv (cq worker
// entered into other namespaces, for instance).
func (e *wkEnv) startWorkerArgv(name string, argv []string) *wkWorker {
	e.t.Helper()
	w := &wkWorker{e: e, name: name, done: make(chan struct{})}
	w.cmd = exec.Command(argv[0], argv[1:]...)
	w.cmd.Env, w.cmd.Dir = e.env, e.dir
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	if err := w.cmd.Start(); err != nil {
		e.t.Fatalf("start worker %s: %v", name, err)
	}
	go func() {
		err := w.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			w.code = ee.ExitCode()
		default:
			w.code = -2
		}
		close(w.done)
	}()
	e.t.Cleanup(func() {
		select {
		case <-w.done:
			return
		default:
		}
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(20 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		e.t.Logf("worker %s stderr:\n%s", w.name, w.stderr.String())
	})
	return w
}

func (w *wkWorker) signal(sig syscall.Signal) {
	w.e.t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.e.t.Fatalf("signal worker %s: %v", w.name, err)
	}
}

// wait waits for the worker to exit and returns its exit code.
func (w *wkWorker) wait(timeout time.Duration) int {
	w.e.t.Helper()
	select {
	case <-w.done:
		return w.code
	case <-time.After(timeout):
		w.e.t.Fatalf("worker %s did not exit within %v; stderr:\n%s", w.name, timeout, w.stderr.String())
		return 0
	}
}

// stop sends SIGTERM and requires a clean exit (0) and a well-formed log:
// nothing on stdout, one JSON object per stderr line.
func (w *wkWorker) stop() {
	w.e.t.Helper()
	w.signal(syscall.SIGTERM)
	if code := w.wait(30 * time.Second); code != 0 {
		w.e.t.Errorf("worker %s exited %d after SIGTERM, want 0; stderr:\n%s", w.name, code, w.stderr.String())
	}
	w.checkLog()
}

// checkLog: stdout carries nothing; stderr is one JSON object per line.
func (w *wkWorker) checkLog() {
	w.e.t.Helper()
	if out := w.stdout.String(); out != "" {
		w.e.t.Errorf("worker %s wrote to stdout: %q", w.name, out)
	}
	for _, line := range strings.Split(strings.TrimRight(w.stderr.String(), "\n"), "\n") {
		var v map[string]any
		if line != "" && json.Unmarshal([]byte(line), &v) != nil {
			w.e.t.Errorf("worker %s: stderr line is not a JSON object: %q", w.name, line)
		}
	}
}

// logLines are the worker's stderr lines decoded.
func (w *wkWorker) logLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(w.stderr.String(), "\n") {
		var v map[string]any
		if json.Unmarshal([]byte(line), &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// batch enqueues JSONL specs in one transaction and returns the ids.
func (e *wkEnv) batch(lines []map[string]any) []string {
	e.t.Helper()
	var b strings.Builder
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			e.t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	out, errs, code := e.runIn(b.String(), "enqueue", "--batch")
	if code != 0 || errs != "" {
		e.t.Fatalf("cq enqueue --batch: exit %d, stderr %q", code, errs)
	}
	ids := strings.Fields(out)
	if len(ids) != len(lines) {
		e.t.Fatalf("cq enqueue --batch printed %d ids for %d lines", len(ids), len(lines))
	}
	return ids
}

// waitAll runs cq wait on ids and requires exit 0 (all done).
func (e *wkEnv) waitAll(ids []string, timeout time.Duration) {
	e.t.Helper()
	args := append([]string{"wait", "--timeout", timeout.String()}, ids...)
	out, errs, code := e.run(args...)
	if code != 0 {
		e.t.Fatalf("cq wait: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// readLines reads a file the tasks appended to.
func (e *wkEnv) readLines(name string) []string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// ---- (a) many workers, exactly once ----

// TestWorkerManyExactlyOnce: 3 workers × concurrency 4 (lease 3 s) on
// one home, 300 tasks enqueued in one batch, cq heartbeat running beside
// them: every task runs exactly once (one start and one end line, one
// run) and ends done, those that outlive the lease included.
func TestWorkerManyExactlyOnce(t *testing.T) {
	e := wkNewEnv(t)
	var workers []*wkWorker
	for i := range 3 {
		workers = append(workers, e.startWorker(fmt.Sprintf("w%d", i), "--concurrency", "4", "--lease", "3s"))
	}
	log := e.path("log")
	const n = 300
	var lines []map[string]any
	for i := range n {
		lines = append(lines, map[string]any{
			"id":    fmt.Sprintf("t%03d", i),
			"shell": `echo "start $CQ_TASK_ID $CQ_RUN_ID" >> ` + log + `; echo "end $CQ_TASK_ID $CQ_RUN_ID" >> ` + log,
		})
	}
	// A few run longer than the 3 s lease: healthy workers renew it, and
	// the heartbeats running meanwhile reap nothing.
	for i := range 3 {
		lines[i*100]["shell"] = `sleep 4; ` + lines[i*100]["shell"].(string)
	}
	ids := e.batch(lines)
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			cmd := exec.CommandContext(hbCtx, "cq", "heartbeat")
			cmd.Env, cmd.Dir = e.env, e.dir
			_ = cmd.Run()
		}
	}()
	t.Cleanup(func() { stopHB(); <-hbDone })
	e.waitAll(ids, 60*time.Second)
	stopHB()
	<-hbDone

	starts, ends := map[string][]string{}, map[string][]string{}
	for i, l := range e.readLines("log") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("log line %d malformed (torn write?): %q", i, l)
		}
		switch f[0] {
		case "start":
			starts[f[1]] = append(starts[f[1]], f[2])
		case "end":
			if len(starts[f[1]]) != len(ends[f[1]])+1 {
				t.Errorf("task %s: end before its start (line %d)", f[1], i)
			}
			ends[f[1]] = append(ends[f[1]], f[2])
		default:
			t.Fatalf("log line %d malformed: %q", i, l)
		}
	}
	for _, id := range ids {
		if len(starts[id]) != 1 || len(ends[id]) != 1 {
			t.Errorf("task %s ran %d times (%d ends), want exactly once", id, len(starts[id]), len(ends[id]))
		}
	}
	if len(starts) != n {
		t.Errorf("%d distinct tasks ran, want %d", len(starts), n)
	}

	done := 0
	for _, task := range e.tasks() {
		if task.State == "done" && task.Attempts == 1 {
			done++
		} else {
			t.Errorf("task %s: state %s, attempts %d; want done after 1 attempt", task.ID, task.State, task.Attempts)
		}
	}
	if done != n {
		t.Errorf("%d tasks done after one attempt, want %d", done, n)
	}

	// The event log agrees: one run per task, claimed once, succeeded
	// once, and the runs were spread over the workers.
	queued, succeeded := map[string]int{}, map[string]int{}
	runOf := map[string]string{}
	byWorker := map[string]int{}
	for _, ev := range e.events() {
		switch ev.Kind {
		case "run.queued":
			queued[nullStr(ev.TaskID)]++
			runOf[nullStr(ev.TaskID)] = nullStr(ev.RunID)
			var d struct {
				Worker string `json:"worker"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			byWorker[d.Worker]++
		case "run.succeeded":
			succeeded[nullStr(ev.TaskID)]++
		}
	}
	for _, id := range ids {
		if queued[id] != 1 || succeeded[id] != 1 {
			t.Errorf("task %s: %d run.queued and %d run.succeeded events, want 1 and 1", id, queued[id], succeeded[id])
		}
		if len(starts[id]) == 1 && starts[id][0] != runOf[id] {
			t.Errorf("task %s ran with CQ_RUN_ID %s, but its run is %s", id, starts[id][0], runOf[id])
		}
	}
	if len(byWorker) < 2 {
		t.Errorf("all runs went to %v; 3 idle workers should share 300 tasks", byWorker)
	}
	t.Logf("runs per worker: %v", byWorker)
	for _, w := range workers {
		w.stop()
	}
}

// TestWorkerOnceFastTasks: 1500 tasks that exit at once, one worker at
// concurrency 8 with --once. Spawns land on the loop while other runs
// end, so a run may exit before the loop has taken in its spawn; every
// start must still be recorded before its end (finish adopts waiting
// spawns after it has read the exits). The worker exits 0 when the
// backlog is gone, every task is done after one attempt, and the log has
// no refused start or end. The losing interleaving needs the loop to be
// preempted at one point, so this run catches it only now and then.
func TestWorkerOnceFastTasks(t *testing.T) {
	e := wkNewEnv(t)
	const n = 1500
	lines := make([]map[string]any, n)
	for i := range lines {
		lines[i] = map[string]any{"cmd": []string{"true"}}
	}
	e.batch(lines)
	w := e.startWorker("once", "--once", "--concurrency", "8")
	if code := w.wait(120 * time.Second); code != 0 {
		t.Fatalf("worker --once exited %d, want 0; stderr:\n%s", code, w.stderr.String())
	}
	w.checkLog()
	for _, l := range w.logLines() {
		if msg, _ := l["msg"].(string); strings.HasSuffix(msg, "_refused") || l["level"] == "ERROR" {
			t.Errorf("worker log: %v", l)
		}
	}
	done, bad := 0, 0
	for _, task := range e.tasks() {
		switch {
		case task.State == "done" && task.Attempts == 1:
			done++
		case bad < 5:
			bad++
			t.Errorf("task %s: state %s, attempts %d; want done after 1 attempt", task.ID, task.State, task.Attempts)
		}
	}
	if done != n {
		t.Errorf("%d of %d tasks done after one attempt", done, n)
	}
}

// ---- (b) key lanes ----

// TestWorkerKeyLanes: tasks sharing a --key never overlap and run in the
// order they were enqueued, whatever their priority, across 3 workers;
// different keys do run side by side.
func TestWorkerKeyLanes(t *testing.T) {
	e := wkNewEnv(t)
	var workers []*wkWorker
	for i := range 3 {
		workers = append(workers, e.startWorker(fmt.Sprintf("w%d", i), "--concurrency", "3"))
	}
	log := e.path("log")
	const keys, per = 4, 6
	prios := []string{"P3", "P0", "P2", "P1", "P0", "P3"}
	var lines []map[string]any
	for n := range per {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			lines = append(lines, map[string]any{
				"id": fmt.Sprintf("%s-%d", key, n), "key": key, "priority": prios[(n+k)%len(prios)],
				"shell": fmt.Sprintf(`echo "start %s %d" >> %s; sleep 0.1; echo "end %s %d" >> %s`, key, n, log, key, n, log),
			})
		}
	}
	ids := e.batch(lines)
	e.waitAll(ids, 60*time.Second)

	next := map[string]int{}     // per key: the next task number expected to start
	running := map[string]bool{} // per key: a task has started and not ended
	live, maxLive := 0, 0
	for i, l := range e.readLines("log") {
		var what, key string
		var num int
		if _, err := fmt.Sscanf(l, "%s %s %d", &what, &key, &num); err != nil {
			t.Fatalf("log line %d malformed: %q", i, l)
		}
		switch what {
		case "start":
			if running[key] {
				t.Errorf("line %d: %s-%d started while another task of key %s runs", i, key, num, key)
			}
			if num != next[key] {
				t.Errorf("line %d: %s-%d started, want %s-%d (enqueue order)", i, key, num, key, next[key])
			}
			running[key] = true
			next[key] = num + 1
			live++
			maxLive = max(maxLive, live)
		case "end":
			if !running[key] || num != next[key]-1 {
				t.Errorf("line %d: %s-%d ended but was not the running task of its lane", i, key, num)
			}
			running[key] = false
			live--
		}
	}
	for k := range keys {
		if key := fmt.Sprintf("k%d", k); next[key] != per {
			t.Errorf("key %s: %d tasks started, want %d", key, next[key], per)
		}
	}
	if maxLive < 2 {
		t.Errorf("at most %d task ran at a time; 4 independent lanes on 9 slots should overlap", maxLive)
	}
	for _, w := range workers {
		w.stop()
	}
}

// ---- (c) queue concurrency ----

// TestWorkerQueueConcurrency: cq queue set Q --concurrency 2 holds across
// 3 workers with 3 slots each: each task counts the tasks of Q running
// with it (a folder per live task); the count never exceeds 2 and does
// reach 2.
func TestWorkerQueueConcurrency(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("queue", "set", "lim", "--concurrency", "2")
	var workers []*wkWorker
	for i := range 3 {
		workers = append(workers, e.startWorker(fmt.Sprintf("w%d", i), "--concurrency", "3"))
	}
	slots, counts := e.path("slots"), e.path("counts")
	if err := os.Mkdir(slots, 0o700); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for i := range 10 {
		lines = append(lines, map[string]any{
			"id": fmt.Sprintf("q%02d", i), "queue": "lim",
			"shell": fmt.Sprintf(`mkdir %[1]s/$CQ_TASK_ID && ls %[1]s | wc -l >> %[2]s; sleep 0.4; rmdir %[1]s/$CQ_TASK_ID`, slots, counts),
		})
	}
	// An unlimited queue beside it is not held back by lim's limit.
	for i := range 4 {
		lines = append(lines, map[string]any{"id": fmt.Sprintf("free%d", i), "queue": "other", "cmd": []string{"true"}})
	}
	ids := e.batch(lines)
	e.waitAll(ids, 60*time.Second)
	most := 0
	got := e.readLines("counts")
	for _, l := range got {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil {
			t.Fatalf("counts line %q", l)
		}
		most = max(most, n)
	}
	if len(got) != 10 {
		t.Errorf("%d counts recorded, want 10", len(got))
	}
	if most > 2 {
		t.Errorf("%d tasks of queue lim ran at once, want at most 2 (counts %v)", most, got)
	}
	if most < 2 {
		t.Errorf("tasks of queue lim never ran 2 at once (counts %v): the limit is 2, 9 slots were free", got)
	}
	for _, w := range workers {
		w.stop()
	}
}

// ---- (d) priorities ----

// TestWorkerPriorities: one worker, concurrency 1: P0 tasks enqueued after
// P3 ones start first; FIFO within a priority; across queues too.
func TestWorkerPriorities(t *testing.T) {
	e := wkNewEnv(t)
	order := e.path("order")
	for _, x := range []struct{ id, prio, queue string }{
		{"p3a", "P3", "default"}, {"p3b", "P3", "other"}, {"p2a", "P2", "default"}, {"p0a", "P0", "other"},
		{"p3c", "P3", "default"}, {"p0b", "P0", "default"}, {"p1a", "P1", "other"}, {"p0c", "P0", "other"},
	} {
		e.ok("enqueue", "--id", x.id, "--priority", x.prio, "--queue", x.queue, "--shell", "echo $CQ_TASK_ID >> "+order)
	}
	w := e.startWorker("w", "--once")
	if code := w.wait(60 * time.Second); code != 0 {
		t.Fatalf("cq worker --once exited %d; stderr:\n%s", code, w.stderr.String())
	}
	w.checkLog()
	got := strings.Join(e.readLines("order"), " ")
	if want := "p0a p0b p0c p1a p2a p3a p3b p3c"; got != want {
		t.Errorf("tasks ran in the order %q, want %q", got, want)
	}
}

// ---- (e) a SIGKILLed worker ----

// TestWorkerKilledMidRun: SIGKILL a worker while its task runs a shell
// with two children: no process of the run survives; the lease (3 s)
// expires, cq heartbeat reaps the run (failed, transient class: the task
// is blocked for a retry although it has no --retries); cq retry skips
// the 30 s backoff and a second worker runs attempt 2 to done.
func TestWorkerKilledMidRun(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "victim", "--shell",
		`if [ "$CQ_ATTEMPT" -ge 2 ]; then echo second; exit 0; fi; sleep 100 & sleep 100; wait`)
	a := e.startWorker("A", "--lease", "3s")
	r1 := e.waitRunning("victim", 1)
	e.waitProcs(r1.ID, 3, 30*time.Second) // sh and its two sleeps
	a.signal(syscall.SIGKILL)
	if code := a.wait(10 * time.Second); code != -1 {
		t.Fatalf("worker A exited %d, want killed by a signal", code)
	}
	killedAt := time.Now()
	e.waitProcs(r1.ID, 0, 10*time.Second)
	t.Logf("the run's processes were gone %v after the worker died", time.Since(killedAt).Round(time.Millisecond))

	// The lease expires; the heartbeat reaps the run.
	var task wkTask
	e.eventually(30*time.Second, "run 1 reaped by cq heartbeat", func() (bool, string) {
		e.ok("heartbeat")
		task = e.show("victim")
		return task.Runs[0].State != "running", task.Runs[0].String()
	})
	run1 := task.Runs[0]
	if run1.State != "failed" || nullStr(run1.Reason) != "lease_expired" {
		t.Errorf("reaped run: state %s, reason %s; want failed, lease_expired", run1.State, nullStr(run1.Reason))
	}
	if task.State != "blocked" || nullStr(task.BlockedReason) != "retry" {
		t.Fatalf("after the reap the task is %s (%s); want blocked for a retry (transient class, 3 retries)",
			task.State, nullStr(task.BlockedReason))
	}
	if task.NotBefore == nil {
		t.Fatalf("blocked for a retry without not_before")
	}
	if nb, err := time.Parse(time.RFC3339Nano, *task.NotBefore); err != nil {
		t.Errorf("not_before %q: %v", *task.NotBefore, err)
	} else if wait := time.Until(nb); wait < 20*time.Second || wait > 31*time.Second {
		t.Errorf("retry due in %v, want the transient class's first backoff, 30 s", wait)
	}

	// The run ended: its summary.json is written when the run
	// ends (docs/semantics.md, Running a task), by whoever ended it.
	if b, err := os.ReadFile(filepath.Join(e.home, "runs", run1.ID, "summary.json")); err != nil {
		t.Errorf("run 1 ended (reaped by cq heartbeat) but has no summary.json: %v", err)
	} else if !strings.Contains(string(b), `"failed"`) {
		t.Errorf("run 1's summary.json does not say failed: %s", b)
	}

	e.ok("retry", "victim")
	b := e.startWorker("B", "--lease", "3s")
	task = e.waitTask("victim", "done", 60*time.Second)
	if len(task.Runs) != 2 || task.Attempts != 2 {
		t.Fatalf("task has %d runs, attempts %d; want 2 and 2: %v", len(task.Runs), task.Attempts, task.Runs)
	}
	r2 := task.Runs[1]
	if r2.Attempt != 2 || r2.State != "succeeded" || nullStr(r2.Worker) == nullStr(run1.Worker) {
		t.Errorf("run 2: attempt %d, state %s, worker %s (run 1's: %s); want attempt 2 succeeded on another worker",
			r2.Attempt, r2.State, nullStr(r2.Worker), nullStr(run1.Worker))
	}
	if out := e.ok("logs", "victim"); out != "second\n" {
		t.Errorf("cq logs victim = %q, want %q", out, "second\n")
	}
	b.stop()
}

// ---- (f) fencing ----

// TestWorkerFencedAfterTakeover: a worker stopped (SIGSTOP) mid-run loses
// its 3 s lease; the heartbeat reaps the run and another worker runs the
// task to done. Meanwhile the first worker's process ended with exit 0
// (a success it would like to report). When the first worker resumes
// (SIGCONT), nothing it writes changes the task or its runs: the final
// state and runs are the second worker's, the first run stays as the
// reaper wrote it, and no event about the task follows.
func TestWorkerFencedAfterTakeover(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "fenced", "--shell",
		`if [ "$CQ_ATTEMPT" -ge 2 ]; then echo second; exit 0; fi; touch started; while [ ! -e go ]; do sleep 0.05; done; echo first`)
	a := e.startWorker("A", "--lease", "3s")
	r1 := e.waitRunning("fenced", 1)
	e.waitFile("started")
	a.signal(syscall.SIGSTOP)
	// Let the first attempt's process end on its own, successfully, while
	// its worker cannot see it.
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitProcs(r1.ID, 0, 30*time.Second)

	var task wkTask
	e.eventually(30*time.Second, "run 1 reaped by cq heartbeat", func() (bool, string) {
		e.ok("heartbeat")
		task = e.show("fenced")
		return task.Runs[0].State != "running", task.Runs[0].String()
	})
	if task.Runs[0].State != "failed" || task.State != "blocked" {
		t.Fatalf("after the reap: run 1 %s, task %s; want failed and blocked (retry)", task.Runs[0].State, task.State)
	}
	e.ok("retry", "fenced")
	b := e.startWorker("B", "--lease", "3s")
	task = e.waitTask("fenced", "done", 60*time.Second)
	b.stop()
	before := e.ok("show", "-o", "json", "fenced")
	evs := e.events()
	lastSeq := evs[len(evs)-1].Seq

	// The first worker resumes: it must notice that the lease is lost (or
	// be refused) and write nothing.
	a.signal(syscall.SIGCONT)
	e.eventually(30*time.Second, "worker A gives run 1 up", func() (bool, string) {
		for _, l := range a.logLines() {
			if l["run"] == r1.ID && (l["msg"] == "run.lost" || l["msg"] == "run.finish_refused") {
				return true, ""
			}
			if l["run"] == r1.ID && l["msg"] == "run.finished" {
				return true, "A recorded run 1 as finished"
			}
		}
		return false, a.stderr.String()
	})
	a.stop()

	after := e.ok("show", "-o", "json", "fenced")
	if after != before {
		t.Errorf("the stale worker changed the task:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	task = e.show("fenced")
	if task.State != "done" || len(task.Runs) != 2 || task.Runs[0].State != "failed" || task.Runs[1].State != "succeeded" {
		t.Errorf("final task %s with runs %v; want done, runs failed (reaped) then succeeded", task.State, task.Runs)
	}
	if task.Runs[0].ExitCode != nil {
		t.Errorf("run 1 has exit_code %d: the stale worker's exit 0 was recorded", *task.Runs[0].ExitCode)
	}
	for _, ev := range e.events() {
		if ev.Seq > lastSeq && (nullStr(ev.TaskID) == "fenced" || nullStr(ev.RunID) == r1.ID) {
			t.Errorf("event after the takeover finished: %v", ev)
		}
	}
	for _, l := range a.logLines() {
		if l["run"] == r1.ID && l["msg"] == "run.finished" {
			t.Errorf("stale worker A logged run 1 as finished: %v", l)
		}
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", r1.ID, "summary.json")); err == nil {
		b, _ := os.ReadFile(filepath.Join(e.home, "runs", r1.ID, "summary.json"))
		if strings.Contains(string(b), `"succeeded"`) {
			t.Errorf("run 1's summary.json says succeeded: %s", b)
		}
	}
}

// ---- graceful stop ----

// TestWorkerGracefulStop: SIGTERM while two runs live. The one that ends
// within --grace is recorded as usual (done); the one that ignores
// SIGTERM is killed (SIGTERM, SIGKILL 2 s later, grandchildren included)
// and released: run cancelled (reason released), task back in todo with
// no budget spent. The worker exits 0 within --grace + 3 s.
func TestWorkerGracefulStop(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "short", "--shell", `touch short-started; while [ ! -e go ]; do sleep 0.05; done; echo short`)
	e.ok("enqueue", "--id", "stubborn", "--retries", "1", "--shell",
		`if [ "$CQ_ATTEMPT" -ge 2 ]; then exit 1; fi; trap "" TERM; touch stubborn-started; sleep 100 & sleep 100; wait`)
	const grace = 2 * time.Second
	w := e.startWorker("w", "--concurrency", "2", "--grace", grace.String())
	e.waitFile("short-started")
	e.waitFile("stubborn-started")
	r := e.waitRunning("stubborn", 1)
	e.waitProcs(r.ID, 3, 30*time.Second)

	sent := time.Now()
	w.signal(syscall.SIGTERM)
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code := w.wait(grace + 20*time.Second)
	took := time.Since(sent)
	if code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0", code)
	}
	if took > grace+3*time.Second {
		t.Errorf("worker took %v to stop, want at most --grace + 3 s = %v", took.Round(time.Millisecond), grace+3*time.Second)
	}
	t.Logf("stopped in %v", took.Round(time.Millisecond))
	w.checkLog()
	e.waitProcs(r.ID, 0, 5*time.Second)

	short := e.show("short")
	if short.State != "done" || short.Runs[0].State != "succeeded" {
		t.Errorf("short: task %s, run %s; want done and succeeded (it ended within the grace)", short.State, short.Runs[0].State)
	}
	st := e.show("stubborn")
	if st.State != "todo" || len(st.Runs) != 1 || st.Runs[0].State != "cancelled" || nullStr(st.Runs[0].Reason) != "released" {
		t.Fatalf("stubborn: task %s, runs %v; want todo, one run cancelled with reason released", st.State, st.Runs)
	}
	// Killed by the stop: SIGTERM is ignored, so SIGKILL 2 s later.
	if sig := nullStr(st.Runs[0].Signal); sig != "SIGKILL" || st.Runs[0].ExitCode != nil {
		t.Errorf("stubborn's released run: signal %q, exit code %v; want SIGKILL and null", sig, st.Runs[0].ExitCode)
	}
	if _, err := os.Stat(filepath.Join(e.home, "runs", r.ID, "summary.json")); err != nil {
		t.Errorf("released run has no summary.json: %v", err)
	}
	// No budget spent: attempt 2 fails at once, and with --retries 1 that
	// failure is retried (blocked), where a spent budget would fail it.
	e.ok("queue", "set", "default", "--backoff", "1h")
	w2 := e.startWorker("w2", "--once")
	if code := w2.wait(60 * time.Second); code != 0 {
		t.Fatalf("cq worker --once exited %d", code)
	}
	w2.checkLog()
	st = e.show("stubborn")
	if st.State != "blocked" || nullStr(st.BlockedReason) != "retry" || len(st.Runs) != 2 || st.Runs[1].State != "failed" {
		t.Errorf("after a failed attempt 2: task %s (%s), runs %v; want blocked for a retry: the release spent no budget",
			st.State, nullStr(st.BlockedReason), st.Runs)
	}
}

// TestWorkerCancelDuringGracefulStop: a cancel that comes while a
// stopping worker gives its runs their grace is acted on within about a
// second, not when the grace runs out: the run ends cancelled (not
// released) and the task cancelled.
func TestWorkerCancelDuringGracefulStop(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "long", "--shell", `touch long-started; sleep 100 & wait`)
	const grace = 60 * time.Second
	w := e.startWorker("w", "--grace", grace.String())
	e.waitFile("long-started")
	r := e.waitRunning("long", 1)
	w.signal(syscall.SIGTERM)
	// The stop has begun once the worker has logged it.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w.stderr.String(), "worker.stopping") {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never logged worker.stopping:\n%s", w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancelled := time.Now()
	e.ok("cancel", "long")
	// Well inside the grace: a cancel waiting for the grace to end fails.
	if code := w.wait(grace / 3); code != 0 {
		t.Fatalf("worker exited %d, want 0", code)
	}
	t.Logf("the worker stopped %v after the cancel", time.Since(cancelled).Round(time.Millisecond))
	w.checkLog()
	e.waitProcs(r.ID, 0, 5*time.Second)
	st := e.show("long")
	if st.State != "cancelled" || len(st.Runs) != 1 || st.Runs[0].State != "cancelled" || nullStr(st.Runs[0].Reason) == "released" {
		t.Fatalf("long: task %s, runs %v; want cancelled, one run cancelled by the user (not released)", st.State, st.Runs)
	}
}

// ---- more of section 6 ----

// TestWorkerKeyLaneHoldsBack: inside one key lane, a task blocked for a
// retry or by a hold holds back the tasks behind it; a task that ends
// failed hands the lane on. Two workers with two slots each.
func TestWorkerKeyLaneHoldsBack(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("queue", "set", "default", "--backoff", "1s")
	log := e.path("log")
	step := func(name, tail string) string {
		return fmt.Sprintf(`echo "start %s $CQ_ATTEMPT" >> %s; %s; r=$?; echo "end %s $CQ_ATTEMPT" >> %s; exit $r`, name, log, tail, name, log)
	}
	ids := e.batch([]map[string]any{
		{"id": "k1", "key": "k", "retries": 1, "shell": step("k1", `[ "$CQ_ATTEMPT" -ge 2 ]`)},
		{"id": "k2", "key": "k", "priority": "P0", "shell": step("k2", "true")},
		{"id": "k3", "key": "k", "shell": step("k3", "false")},
		{"id": "k4", "key": "k", "shell": step("k4", "true")},
		{"id": "k5", "key": "k", "hold": true, "shell": step("k5", "true")},
		{"id": "k6", "key": "k", "priority": "P0", "shell": step("k6", "true")},
	})
	var workers []*wkWorker
	for i := range 2 {
		workers = append(workers, e.startWorker(fmt.Sprintf("w%d", i), "--concurrency", "2"))
	}
	e.waitTask("k4", "done", 60*time.Second)
	// k5 is held: k6 behind it must not start, although the workers are
	// idle and claim other work.
	e.ok("enqueue", "--id", "probe", "--", "true")
	e.waitTask("probe", "done", 30*time.Second)
	if k6 := e.show("k6"); k6.State != "todo" || len(k6.Runs) != 0 {
		t.Fatalf("k6 is %s with %d runs while k5 ahead of it in the lane is held; want todo, no run", k6.State, len(k6.Runs))
	}
	e.ok("release", "k5")
	e.waitAll(ids[4:], 60*time.Second)
	got := strings.Join(e.readLines("log"), "|")
	want := "start k1 1|end k1 1|start k1 2|end k1 2|start k2 1|end k2 1|start k3 1|end k3 1|" +
		"start k4 1|end k4 1|start k5 1|end k5 1|start k6 1|end k6 1"
	if got != want {
		t.Errorf("lane ran as\n%s\nwant\n%s", strings.ReplaceAll(got, "|", "\n"), strings.ReplaceAll(want, "|", "\n"))
	}
	if k3 := e.show("k3"); k3.State != "failed" {
		t.Errorf("k3 is %s, want failed", k3.State)
	}
	for _, w := range workers {
		w.stop()
	}
}

// TestWorkerLogsFollow: output goes straight to the run's files: cq logs
// --follow prints a line the task wrote while the task still runs, and
// ends (0) when the run ends, with all of the output.
func TestWorkerLogsFollow(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "talk", "--shell", `echo first; while [ ! -e go ]; do sleep 0.05; done; echo second`)
	w := e.startWorker("w")
	e.waitRunning("talk", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := exec.CommandContext(ctx, "cq", "logs", "--follow", "talk")
	f.Env, f.Dir = e.env, e.dir
	out, err := f.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb syncBuffer
	f.Stderr = &errb
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if l != "first" {
			t.Fatalf("cq logs --follow printed %q first, want %q", l, "first")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("cq logs --follow printed nothing while the task ran")
	}
	if task := e.show("talk"); task.State != "doing" {
		t.Fatalf("task is %s, want still doing: the test proves nothing", task.State)
	}
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if err := f.Wait(); err != nil {
		t.Errorf("cq logs --follow: %v; stderr %q", err, errb.String())
	}
	if len(rest) != 1 || rest[0] != "second" {
		t.Errorf("cq logs --follow printed %q after the first line, want [second]", rest)
	}
	w.stop()
}

// TestWorkerLeaseLostWhileStoreLocked: a worker that cannot write to the
// store (another process holds SQLite's write lock) keeps its process
// while its lease is valid, but at 2/3 of the TTL without a renewal it
// kills the run's process group, so the old process is gone before
// anyone else may take the task (lease 3 s: gone about 2-3 s after the
// last renewal; 6 s allowed here). It then writes nothing more for that
// run: the reaper ends it.
func TestWorkerLeaseLostWhileStoreLocked(t *testing.T) {
	e := wkNewSQLiteEnv(t)
	e.ok("enqueue", "--id", "locked", "--shell", `sleep 100 & sleep 100; wait`)
	w := e.startWorker("w", "--lease", "3s")
	r := e.waitRunning("locked", 1)
	e.waitProcs(r.ID, 3, 30*time.Second)

	d, err := sql.Open("sqlite3", "file:"+filepath.Join(e.home, "cq.db")+"?_busy_timeout=20000")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	conn, err := d.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	unlock := func() {
		if conn != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			conn = nil
		}
	}
	defer unlock()
	var left []int
	for time.Since(locked) < 6*time.Second {
		if left = wkRunProcs(r.ID); len(left) == 0 {
			break
		}
		time.Sleep(pollEvery)
	}
	gone := time.Since(locked)
	unlock()
	if len(left) > 0 {
		t.Errorf("store locked for %v with a 3 s lease, and the run's processes still live: %s",
			gone.Round(time.Millisecond), wkDescribeProcs(left))
	} else {
		t.Logf("the run's processes were gone %v after the store was locked", gone.Round(time.Millisecond))
	}
	e.waitProcs(r.ID, 0, 30*time.Second)
	e.eventually(30*time.Second, "the worker logs that it lost the run", func() (bool, string) {
		return strings.Contains(w.stderr.String(), `"run.lost"`), w.stderr.String()
	})
	// The worker wrote nothing for the run: it is still running in the
	// store until the reaper ends it.
	if task := e.show("locked"); task.Runs[0].State != "running" {
		t.Errorf("the worker that lost its lease wrote run 1 as %s", task.Runs[0].State)
	}
	e.eventually(30*time.Second, "run 1 reaped", func() (bool, string) {
		e.ok("heartbeat")
		task := e.show("locked")
		return task.Runs[0].State == "failed" && nullStr(task.Runs[0].Reason) == "lease_expired", task.Runs[0].String()
	})
	w.stop()
}

// TestWorkerCancelAfterExit: the process ended on its own (exit 0) after
// the user's cancel but before the worker saw the cancel (the worker is
// stopped meanwhile): the run ends succeeded and the task done (a run
// goes cancelling → succeeded when the process ended on its own before
// the kill), never cancelled. Which of the two the worker notices
// first after SIGCONT is up to its scheduler, so the scene is played
// several times.
func TestWorkerCancelAfterExit(t *testing.T) {
	e := wkNewEnv(t)
	w := e.startWorker("w", "--grace", "5s")
	const rounds = 5
	var bad []string
	for i := range rounds {
		id := fmt.Sprintf("race%d", i)
		e.ok("enqueue", "--id", id, "--shell", fmt.Sprintf(`touch started%d; while [ ! -e go%d ]; do sleep 0.05; done; echo finished`, i, i))
		r := e.waitRunning(id, 1)
		e.waitFile(fmt.Sprintf("started%d", i))
		w.signal(syscall.SIGSTOP)
		e.ok("cancel", id)
		if task := e.show(id); task.Runs[0].State != "cancelling" {
			t.Fatalf("after cq cancel the run is %s, want cancelling", task.Runs[0].State)
		}
		if err := os.WriteFile(e.path(fmt.Sprintf("go%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		e.waitProcs(r.ID, 0, 30*time.Second) // ended, unreaped: a zombie of the stopped worker
		w.signal(syscall.SIGCONT)
		var task wkTask
		e.eventually(30*time.Second, "task "+id+" terminal", func() (bool, string) {
			task = e.show(id)
			return task.State == "done" || task.State == "cancelled" || task.State == "failed", task.State
		})
		if task.State != "done" || task.Runs[0].State != "succeeded" {
			bad = append(bad, fmt.Sprintf("%s: task %s, run %s (exit %v, signal %s)", id, task.State, task.Runs[0].State,
				task.Runs[0].ExitCode != nil, nullStr(task.Runs[0].Signal)))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d rounds: want task done and run succeeded, the process having exited 0 on its own before any kill:\n%s",
			len(bad), rounds, strings.Join(bad, "\n"))
	}
	w.stop()
}

// TestWorkerKilledSetsidOrphan: "if the worker dies, however it dies,
// every process of its runs dies too, grandchildren included; no orphan
// survives a SIGKILLed worker" — a grandchild that left the run's process
// group (setsid) is still a process of the run.
func TestWorkerKilledSetsidOrphan(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "escape", "--shell", `setsid sleep 100 & sleep 100; wait`)
	a := e.startWorker("A")
	r := e.waitRunning("escape", 1)
	e.waitProcs(r.ID, 3, 30*time.Second)
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	e.waitProcs(r.ID, 0, 10*time.Second)
}

// TestWorkerCancelWhileWorkerStopped: a user cancels a running task whose
// worker is stopped (SIGSTOP, lease 3 s): the worker cannot confirm, so
// the reaper ends the run when the lease expires (cancelling →
// cancelled) and the task ends cancelled, not retried. When the worker
// resumes it writes nothing more, and no process of the run is left.
func TestWorkerCancelWhileWorkerStopped(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "frozen", "--retries", "3", "--shell", `sleep 100 & sleep 100; wait`)
	a := e.startWorker("A", "--lease", "3s")
	r := e.waitRunning("frozen", 1)
	e.waitProcs(r.ID, 3, 30*time.Second)
	a.signal(syscall.SIGSTOP)
	e.ok("cancel", "frozen")
	var task wkTask
	e.eventually(30*time.Second, "run 1 reaped by cq heartbeat", func() (bool, string) {
		e.ok("heartbeat")
		task = e.show("frozen")
		return task.Runs[0].State != "cancelling", task.Runs[0].String()
	})
	if task.Runs[0].State != "cancelled" || task.State != "cancelled" {
		t.Fatalf("after the reap: %v; want run and task cancelled", task)
	}
	before := e.ok("show", "-o", "json", "frozen")
	evs := e.events()
	lastSeq := evs[len(evs)-1].Seq

	a.signal(syscall.SIGCONT)
	e.eventually(30*time.Second, "worker A gives the run up", func() (bool, string) {
		for _, l := range a.logLines() {
			if l["run"] == r.ID && (l["msg"] == "run.lost" || l["msg"] == "run.finish_refused" || l["msg"] == "run.finished") {
				return true, ""
			}
		}
		return false, a.stderr.String()
	})
	e.waitProcs(r.ID, 0, 10*time.Second)
	a.stop()
	if after := e.ok("show", "-o", "json", "frozen"); after != before {
		t.Errorf("the stale worker changed the task:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, ev := range e.events() {
		if ev.Seq > lastSeq {
			t.Errorf("event after the reap: %v", ev)
		}
	}
}

// wkSupervisorOf is the pid of worker pid's cq __supervisor helper, or 0.
func wkSupervisorOf(pid int) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if strings.Contains(string(cmdline), "__supervisor") {
			return p
		}
	}
	return 0
}

// TestWorkerSupervisorRestarts: a worker whose supervisor helper is
// killed starts another and tells it the live runs, so a SIGKILL of the
// worker afterwards still leaves no process of its runs behind
// (docs/semantics.md, Running a task), grandchildren included.
func TestWorkerSupervisorRestarts(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "sup", "--shell", `sleep 100 & sleep 100; wait`)
	a := e.startWorker("A")
	r := e.waitRunning("sup", 1)
	e.waitProcs(r.ID, 3, 30*time.Second) // sh and its two sleeps
	pid := a.cmd.Process.Pid
	first := 0
	e.eventually(10*time.Second, "the worker's supervisor", func() (bool, string) {
		first = wkSupervisorOf(pid)
		return first != 0, "none found"
	})
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually(20*time.Second, "a new supervisor", func() (bool, string) {
		p := wkSupervisorOf(pid)
		return p != 0 && p != first, fmt.Sprintf("supervisor pid %d (the killed one was %d)", p, first)
	})
	a.signal(syscall.SIGKILL)
	if code := a.wait(10 * time.Second); code != -1 {
		t.Fatalf("worker A exited %d, want killed by a signal", code)
	}
	e.waitProcs(r.ID, 0, 10*time.Second)
}

// TestWorkerAndSupervisorKilledTogether: a worker and its supervisor
// SIGKILLed at the same instant leave their run's grandchildren (only the
// direct child dies, by its parent-death signal). The next maintenance
// pass on this host sees the worker's lock free and kills them at once,
// without waiting for the lease (60 s): the run itself stays running
// until its lease expires and the reaper ends it (docs/semantics.md, Leases).
func TestWorkerAndSupervisorKilledTogether(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "both", "--shell", `sleep 100 & sleep 100; wait`)
	a := e.startWorker("A", "--lease", "60s")
	r := e.waitRunning("both", 1)
	e.waitProcs(r.ID, 3, 30*time.Second) // sh and its two sleeps
	sup := 0
	e.eventually(10*time.Second, "the worker's supervisor", func() (bool, string) {
		sup = wkSupervisorOf(a.cmd.Process.Pid)
		return sup != 0, "none found"
	})
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.signal(syscall.SIGKILL)
	if code := a.wait(10 * time.Second); code != -1 {
		t.Fatalf("worker A exited %d, want killed by a signal", code)
	}
	// sh is gone (its parent-death signal); the two sleeps live on.
	e.waitProcs(r.ID, 2, 10*time.Second)
	e.ok("heartbeat")
	e.waitProcs(r.ID, 0, 10*time.Second)
	if got := e.show("both").Runs[0].State; got != "running" {
		t.Errorf("run after the pass: %s, want running until its lease expires", got)
	}
}

// TestWorkerKillsWhatARunLeftBehind: a process a run started outside its
// process group (setsid) is left alone while the run lives, and killed
// once the run has ended on its own, so it cannot overlap the task's next
// run or the next task of its key.
func TestWorkerKillsWhatARunLeftBehind(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("enqueue", "--id", "leaves", "--key", "k", "--shell", `setsid sleep 300 & exit 0`)
	// The daemon outlives one poll sweep before its run ends: it must
	// still be there to write the file the run waits for.
	e.ok("enqueue", "--id", "keeps", "--key", "k", "--shell",
		`setsid sh -c 'sleep 1.5; touch kept; exec sleep 300' & i=0; while [ ! -e kept ]; do i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done`)
	e.startWorker("A")
	leaves := e.waitTask("leaves", "done", 60*time.Second)
	keeps := e.waitTask("keeps", "done", 60*time.Second)
	for _, r := range []wkRun{leaves.Runs[0], keeps.Runs[0]} {
		e.waitProcs(r.ID, 0, 20*time.Second)
	}
}

// TestWorkerOutlivesItsLogReader: a worker whose stderr reader went away
// (cq worker 2>&1 | head -1) goes on with its runs instead of dying of
// SIGPIPE mid-claim; its tasks still get SIGPIPE's default disposition.
func TestWorkerOutlivesItsLogReader(t *testing.T) {
	e := wkNewEnv(t)
	ids := e.batch([]map[string]any{
		{"cmd": []string{"true"}},
		{"shell": "kill -PIPE $$; echo survived"},
		{"cmd": []string{"true"}},
	})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first log line
	cmd := exec.Command("cq", "worker", "--once")
	cmd.Env, cmd.Dir, cmd.Stderr = e.env, e.dir, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker --once with a closed stderr: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("worker --once with a closed stderr did not exit within 60s")
	}
	for i, id := range ids {
		task := e.show(id)
		if i == 1 {
			if task.State != "failed" || len(task.Runs) != 1 || task.Runs[0].Signal == nil || *task.Runs[0].Signal != "SIGPIPE" {
				t.Errorf("task %s: %v; want failed, killed by SIGPIPE (the default disposition)", id, task)
			}
			continue
		}
		if task.State != "done" {
			t.Errorf("task %s: %v; want done", id, task)
		}
	}
}

// TestWorkerRunsWhenItsLogsCannotBeWritten: a failed
// write (disk full) does not stop the run; the failure is in its error.
// Here the run folder cannot be made (runs is a file): the task runs all
// the same, its output is lost, and the run says why.
func TestWorkerRunsWhenItsLogsCannotBeWritten(t *testing.T) {
	e := wkNewEnv(t)
	ids := e.batch([]map[string]any{{"cmd": []string{"touch", e.path("ran")}}})
	if err := os.WriteFile(filepath.Join(e.home, "runs"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := e.startWorker("once", "--once")
	if code := w.wait(60 * time.Second); code != 0 {
		t.Fatalf("worker --once exited %d; stderr:\n%s", code, w.stderr.String())
	}
	if _, err := os.Stat(e.path("ran")); err != nil {
		t.Errorf("the task did not run: %v", err)
	}
	task := e.show(ids[0])
	if task.State != "done" || len(task.Runs) != 1 {
		t.Fatalf("task %v; want done after one run", task)
	}
	if r := task.Runs[0]; r.Error == nil || !strings.Contains(*r.Error, "output lost: run folder") {
		t.Errorf("run %v: want its error to say the output was lost", r)
	}
}

// TestSetStateCancelledOfARunningTask: cq task set-state ID cancelled of
// a doing task cancels it as cq cancel does, then waits for its worker to
// confirm: exit 0 once the task is cancelled (set-state's cancelled
// means cancel). With the worker stopped, --timeout gives up with exit 3
// and the cancel stands: the reaper ends the run cancelled. A run that
// ends on its own first makes set-state exit 3 naming how it ended.
func TestSetStateCancelledOfARunningTask(t *testing.T) {
	e := wkNewEnv(t)
	w := e.startWorker("w", "--grace", "5s")

	e.ok("enqueue", "--id", "long", "--shell", `sleep 100 & sleep 100; wait`)
	r := e.waitRunning("long", 1)
	e.waitProcs(r.ID, 3, 30*time.Second)
	if out := e.ok("task", "set-state", "long", "cancelled", "-o", "json"); !strings.Contains(out, `"state":"cancelled"`) {
		t.Errorf("set-state -o json printed %q; want the task cancelled", out)
	}
	if task := e.show("long"); task.State != "cancelled" || task.Runs[0].State != "cancelled" {
		t.Fatalf("after set-state: %v; want task and run cancelled", task)
	}
	e.waitProcs(r.ID, 0, 10*time.Second)

	// The run ends on its own before the worker acts on the cancel: exit 3.
	e.ok("enqueue", "--id", "quick", "--shell", `touch started; while [ ! -e go ]; do sleep 0.05; done`)
	r = e.waitRunning("quick", 1)
	e.waitFile("started")
	w.signal(syscall.SIGSTOP)
	res := make(chan string, 1)
	go func() {
		_, errs, code := e.run("task", "set-state", "quick", "cancelled")
		res <- fmt.Sprintf("%d %s", code, errs)
	}()
	e.eventually(30*time.Second, "the run cancelling", func() (bool, string) {
		task := e.show("quick")
		return task.Runs[0].State == "cancelling", task.String()
	})
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitProcs(r.ID, 0, 30*time.Second)
	w.signal(syscall.SIGCONT)
	select {
	case got := <-res:
		if !strings.HasPrefix(got, "3 ") || !strings.Contains(got, "quick ended done") || strings.Count(got, "\n") != 1 {
			t.Errorf("set-state of a run that ended on its own: %q; want exit 3 and one line saying it ended done", got)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("set-state did not return once the task ended")
	}
	w.stop()

	// The worker cannot confirm: --timeout gives up, the cancel stands.
	w = e.startWorker("w2", "--lease", "3s")
	e.ok("enqueue", "--id", "frozen", "--shell", `sleep 100`)
	r = e.waitRunning("frozen", 1)
	w.signal(syscall.SIGSTOP)
	_, errs, code := e.run("task", "set-state", "frozen", "cancelled", "--timeout", "300ms")
	if code != 3 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "frozen") {
		t.Errorf("set-state --timeout with the worker stopped: exit %d, stderr %q; want 3 and one line naming the task", code, errs)
	}
	if task := e.show("frozen"); task.Runs[0].State != "cancelling" {
		t.Fatalf("after the timeout the run is %s; want cancelling (the cancel stands)", task.Runs[0].State)
	}
	e.eventually(30*time.Second, "run reaped", func() (bool, string) {
		e.ok("heartbeat")
		task := e.show("frozen")
		return task.State == "cancelled", task.String()
	})
	w.signal(syscall.SIGCONT)
	e.waitProcs(r.ID, 0, 10*time.Second)
	w.stop()
}
