package main

// Multi-host behaviour (SPEC 9, docs/store.md "PostgreSQL"): hosts are
// network namespaces on a bridge of one machine, each worker under a host
// name of its own (a UTS namespace), all sharing a private PostgreSQL
// server started for the test.
//
// TestHostsCutOff: three worker hosts, one cut off from the network
// mid-run. TestHostsFailover: a primary and a synchronous streaming
// standby, the primary stopped and the standby promoted while work runs.
// The harness (hosts_net_test.go) needs root, ip netns and PostgreSQL's
// server binaries; without them the tests skip, saying why in one line.
//
// As in worker_test.go, nothing sleeps to fix a race: every wait is a
// poll with a deadline.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostsMarkScript is a task's command after sh -c: $0 is the marks
// folder, $1 how long the run lasts. The start is marked by the run's
// shell, the end by a grandchild, which only the kill of the run's whole
// process group stops: one that outlived its run would mark an end the
// checks count (runsOverlap, and one end per task).
const hostsMarkScript = `echo "start $CQ_RUN_ID" >> "$0/$CQ_TASK_ID"; ` +
	`sh -c 'sleep "$1"; echo "end $CQ_RUN_ID" >> "$0/$CQ_TASK_ID"' "$0" "$1"`

// hostsEnv is a cq environment of its own (its own home: hosts share the
// database, not their files) whose processes reach the store with db
// (CQ_DB=… or CQ_DB_URLS=…).
func hostsEnv(t *testing.T, db string) *wkEnv {
	t.Helper()
	e := &wkEnv{newCQEnv(t, 90*time.Second, true)}
	e.env = append(e.env, db)
	return e
}

// hostsMarks makes the folder the runs of every host mark into (one file
// system for all the namespaces).
func hostsMarks(t *testing.T, e *wkEnv) string {
	t.Helper()
	marks := e.path("marks")
	if err := os.Mkdir(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	return marks
}

// hostsCheckMarks checks the marks of the tasks ids: no two runs of a task
// overlapped, and each task's runs marked one end between them (a run
// killed with its host left a start alone), or with once false at least
// one (a run whose end could not be recorded runs again). It returns how
// many tasks were started more than once.
func hostsCheckMarks(t *testing.T, marks string, ids []string, once bool) int {
	t.Helper()
	again := 0
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(marks, id))
		if err != nil {
			t.Errorf("task %s: no marks: %v", id, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if err := runsOverlap(lines); err != nil {
			t.Errorf("task %s: %v\n%s", id, err, b)
		}
		if n := strings.Count(string(b), "end "); n == 0 || once && n > 1 {
			t.Errorf("task %s: %d runs marked their end, want one\n%s", id, n, b)
		}
		if strings.Count(string(b), "start ") > 1 {
			again++
		}
	}
	return again
}

// hostsHeartbeats runs cq heartbeat every second from e (the part cron
// plays, docs/operations.md) until the returned stop is called or the
// test ends.
func hostsHeartbeats(t *testing.T, e *wkEnv) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			hctx, hcancel := context.WithTimeout(ctx, 20*time.Second)
			cmd := exec.CommandContext(hctx, "cq", "heartbeat")
			cmd.Env, cmd.Dir = e.env, e.dir
			_ = cmd.Run()
			hcancel()
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// hostsWorkers is cq workers -o json.
func hostsWorkers(e *wkEnv) []wsWorker {
	e.t.Helper()
	var ws []wsWorker
	out := e.ok("workers", "-o", "json")
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		e.t.Fatalf("cq workers -o json: %v: %s", err, out)
	}
	return ws
}

// hostsListed is, by host name, the ids of the workers cq workers lists.
func hostsListed(e *wkEnv) (map[string][]string, string) {
	e.t.Helper()
	by := map[string][]string{}
	var all []string
	for _, w := range hostsWorkers(e) {
		by[w.Host] = append(by[w.Host], w.ID)
		all = append(all, fmt.Sprintf("%s(host %s, %d runs)", w.ID, w.Host, w.Runs))
	}
	return by, strings.Join(all, " ")
}

// alive fails the test if the worker has exited.
func (w *wkWorker) alive() {
	w.e.t.Helper()
	select {
	case <-w.done:
		w.e.t.Fatalf("worker %s exited %d; stderr:\n%s", w.name, w.code, w.stderr.String())
	default:
	}
}

// logged counts the worker's log lines whose msg is msg.
func (w *wkWorker) logged(msg string) int {
	return len(w.linesOf(msg))
}

// linesOf are the worker's log lines whose msg is one of msgs.
func (w *wkWorker) linesOf(msgs ...string) []string {
	var out []string
	for _, line := range strings.Split(w.stderr.String(), "\n") {
		var v map[string]any
		if json.Unmarshal([]byte(line), &v) == nil && slices.Contains(msgs, fmt.Sprint(v["msg"])) {
			out = append(out, line)
		}
	}
	return out
}

// TestHostsCutOff: three worker hosts share the server, each listed by
// cq workers under its host name. Host B is cut off from the network
// while it runs two tasks: it kills their process groups within 2/3 of
// the lease TTL of its last renewal, before the lease can expire on the
// server (docs/semantics.md, Leases); the tasks are reaped, retried after
// the transient backoff (30 s) and run on another host, never two runs
// of a task at once, each done exactly once. Brought back, B's worker
// carries on without a restart: it is listed again, runs a task only it
// takes, and stops cleanly.
func TestHostsCutOff(t *testing.T) {
	pg := hostsPrereqs(t)
	begin := time.Now()
	n := newHostNet(t)
	db := n.addHost("cqdb")
	hosts := []*netHost{n.addHost("hosta"), n.addHost("hostb"), n.addHost("hostc")}
	srv := startPrimary(t, pg, db, false)
	op := hostsEnv(t, "CQ_DB="+srv.url())
	marks := hostsMarks(t, op)
	// Opened once here, so that the workers do not race to migrate.
	op.ok("queue", "set", "default", "--transient-retries", "3")
	t.Logf("network and server ready after %v", time.Since(begin).Round(time.Millisecond))

	const lease = 3 * time.Second
	workers := map[string]*wkWorker{}
	for _, h := range hosts {
		// Each host also takes a queue of its own, so that a task can be
		// sent to one host alone.
		workers[h.name] = h.startWorker(hostsEnv(t, "CQ_DB="+srv.url()),
			"--lease", lease.String(), "--concurrency", "2", "--queue", "default", "--queue", "only-"+h.name)
	}
	idOf := map[string]string{}
	for _, h := range hosts {
		idOf[h.name] = fmt.Sprintf("%s:%d", h.name, workers[h.name].cmd.Process.Pid)
	}
	// Each worker records its host name, and its id is host:pid.
	eventually(t, 30*time.Second, "cq workers lists one worker on each host", func() (bool, string) {
		by, all := hostsListed(op)
		for _, h := range hosts {
			if !slices.Equal(by[h.name], []string{idOf[h.name]}) {
				return false, all
			}
		}
		return len(by) == len(hosts), all
	})

	// Six tasks fill the six slots: each host holds two.
	var lines []map[string]any
	for i := range 6 {
		lines = append(lines, map[string]any{"id": fmt.Sprintf("cut%d", i), "cmd": []string{"sh", "-c", hostsMarkScript, marks, "5"}})
	}
	ids := op.batch(lines)
	eventually(t, 30*time.Second, "two runs on each host", func() (bool, string) {
		by := map[string]int{}
		var all []string
		for _, w := range hostsWorkers(op) {
			by[w.Host] += w.Runs
			all = append(all, fmt.Sprintf("%s:%d runs", w.Host, w.Runs))
		}
		return by["hosta"] == 2 && by["hostb"] == 2 && by["hostc"] == 2, strings.Join(all, " ")
	})
	bRuns := map[string]string{} // run → task, B's
	for _, ev := range op.events() {
		var d struct {
			Worker string `json:"worker"`
		}
		if ev.Kind == "run.queued" && json.Unmarshal(ev.Data, &d) == nil && d.Worker == idOf["hostb"] {
			bRuns[strOf(ev.RunID)] = strOf(ev.TaskID)
		}
	}
	if len(bRuns) != 2 {
		t.Fatalf("host B holds runs %v, want 2", bRuns)
	}
	for run := range bRuns {
		op.waitProcs(run, 2, 30*time.Second)
	}
	stopHB := hostsHeartbeats(t, op)

	hb := hosts[1]
	n.cut(hb)
	cutAt := time.Now()
	ok, last, took := poll(3*lease, func() (bool, string) {
		for run := range bRuns {
			if pids := wkRunProcs(run); len(pids) > 0 {
				return false, "run " + run + ": " + wkDescribeProcs(pids)
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("host B cut off: its runs' processes still live %v later: %s", took, last)
	}
	t.Logf("host B cut off: its runs' processes gone %v after the cut", took.Round(time.Millisecond))
	// The last renewal was at most a third of the TTL before the cut,
	// and the kill comes 2/3 of the TTL after it: the processes are gone
	// before the lease can expire on the server and the task go elsewhere.
	if took > lease {
		t.Errorf("host B's runs were killed %v after the cut, more than the lease TTL (%v)", took, lease)
	}
	// A worker unheard of for a lease TTL is no longer listed.
	eventually(t, 10*lease, "host B no longer listed by cq workers", func() (bool, string) {
		by, all := hostsListed(op)
		return len(by["hostb"]) == 0 && len(by) == 2, all
	})

	// B's tasks are reaped once their leases expire, wait out the
	// transient backoff and run elsewhere; B stays cut off meanwhile.
	var bTasks []string
	for _, task := range bRuns {
		bTasks = append(bTasks, task)
	}
	op.waitAll(bTasks, 70*time.Second)
	t.Logf("host B's tasks done elsewhere %v after the cut", time.Since(cutAt).Round(time.Millisecond))
	for run, id := range bRuns {
		task := op.show(id)
		if len(task.Runs) != 2 {
			t.Errorf("task %s: runs %v, want B's lost run and one more", id, task.Runs)
			continue
		}
		lost, again := task.Runs[0], task.Runs[1]
		if lost.ID != run || lost.State != "failed" || strOf(lost.Reason) != "lease_expired" {
			t.Errorf("task %s: first run %v, want B's run %s failed with lease_expired", id, lost, run)
		}
		if w := strOf(again.Worker); again.State != "succeeded" || (w != idOf["hosta"] && w != idOf["hostc"]) {
			t.Errorf("task %s: second run %v, want it succeeded on host A or C", id, again)
		}
	}
	if got := workers["hostb"].logged("run.lost"); got != 2 {
		t.Errorf("host B's worker logged %d run.lost, want 2; stderr:\n%s", got, workers["hostb"].stderr.String())
	}

	// Back on the network, B's worker carries on: the same process is
	// listed again and takes work. A connection that had a request in
	// flight at the cut learns it is dead only at its next TCP
	// retransmission, which backs off to tens of seconds: hence the
	// generous waits.
	n.restore(hb)
	restoredAt := time.Now()
	workers["hostb"].alive()
	eventually(t, 60*time.Second, "host B listed again", func() (bool, string) {
		by, all := hostsListed(op)
		return slices.Equal(by["hostb"], []string{idOf["hostb"]}), all
	})
	op.ok("enqueue", "--id", "back", "--queue", "only-hostb", "--", "sh", "-c", hostsMarkScript, marks, "0.2")
	op.waitAll([]string{"back"}, 60*time.Second)
	if task := op.show("back"); len(task.Runs) != 1 || strOf(task.Runs[0].Worker) != idOf["hostb"] {
		t.Errorf("task back: runs %v, want one, by host B's worker %s", task.Runs, idOf["hostb"])
	}
	t.Logf("host B back: running again %v after the link came up", time.Since(restoredAt).Round(time.Millisecond))
	stopHB()

	ids = append(ids, "back")
	for _, task := range op.tasks() {
		if task.State != "done" {
			t.Errorf("task %s ended %s, want done", task.ID, task)
		}
	}
	succeeded := map[string]int{}
	for _, ev := range op.events() {
		if ev.Kind == "run.succeeded" {
			succeeded[strOf(ev.TaskID)]++
		}
	}
	for _, id := range ids {
		if succeeded[id] != 1 {
			t.Errorf("task %s: %d run.succeeded events, want 1", id, succeeded[id])
		}
	}
	if again := hostsCheckMarks(t, marks, ids, true); again != 2 {
		t.Errorf("%d tasks started more than once, want B's 2", again)
	}
	for _, h := range hosts {
		workers[h.name].stop()
	}
	t.Logf("B's worker logged %d store errors while cut off", workers["hostb"].logged("store.error"))
	t.Logf("total %v", time.Since(begin).Round(time.Millisecond))
}

// TestHostsFailover: a primary and a streaming standby with synchronous
// replication, workers on two hosts given both (CQ_DB_URLS, primary
// first) and a producer enqueuing all along. The primary is stopped while
// runs are live, its host then cut off (so that a connection to it times
// out rather than being refused), and the standby promoted. A new cq
// command reaches the promoted standby within 5 s of connection timeout
// on the dead primary (plus its start); the workers carry on without a
// restart; every acknowledged enqueue is stored once and ends done; no
// task ran twice at the same time.
func TestHostsFailover(t *testing.T) {
	pg := hostsPrereqs(t)
	begin := time.Now()
	n := newHostNet(t)
	hp, hs := n.addHost("pgprimary"), n.addHost("pgstandby")
	hosts := []*netHost{n.addHost("hostd"), n.addHost("hoste")}
	primary := startPrimary(t, pg, hp, true)
	standby := primary.startStandby(hs)
	primary.waitSyncStandby()
	urls := "CQ_DB_URLS=" + primary.url() + "," + standby.url()
	op := hostsEnv(t, urls)
	marks := hostsMarks(t, op)
	// Opened once here, so that the workers do not race to migrate.
	op.ok("queue", "set", "default", "--transient-retries", "3")
	t.Logf("network, primary and standby ready after %v", time.Since(begin).Round(time.Millisecond))

	// Leases long enough to ride out the failover: while the primary is
	// gone, a new connection spends up to 5 s on it before the next host.
	workers := map[string]*wkWorker{}
	for _, h := range hosts {
		workers[h.name] = h.startWorker(hostsEnv(t, urls), "--lease", "15s", "--concurrency", "2")
	}

	// The producer enqueues a 1 s task every 250 ms from the root
	// namespace until told to stop; an enqueue is acknowledged when it
	// exits 0 and prints the id.
	type ack struct {
		id  string
		at  time.Time
		err string
	}
	var mu sync.Mutex
	var acked []ack
	var refused []ack
	stopProducing := make(chan struct{})
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		for range 120 {
			select {
			case <-stopProducing:
				return
			case <-time.After(250 * time.Millisecond):
			}
			cmd := exec.Command("cq", "enqueue", "--", "sh", "-c", hostsMarkScript, marks, "1")
			cmd.Env, cmd.Dir = op.env, op.dir
			var out, errb syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				continue
			}
			kill := time.AfterFunc(40*time.Second, func() { _ = cmd.Process.Kill() })
			err := cmd.Wait()
			kill.Stop()
			a := ack{id: strings.TrimSpace(out.String()), at: time.Now(), err: strings.TrimSpace(errb.String())}
			mu.Lock()
			if err == nil && a.id != "" {
				acked = append(acked, a)
			} else {
				a.err = fmt.Sprintf("%v: %s", err, a.err)
				refused = append(refused, a)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stopProducing:
		default:
			close(stopProducing)
		}
		producer.Wait()
	})
	stopHB := hostsHeartbeats(t, op)

	// Work flows through the primary, and runs are live when it stops.
	eventually(t, 30*time.Second, "4 tasks done and a run live", func() (bool, string) {
		done := 0
		for _, task := range op.tasks() {
			if task.State == "done" {
				done++
			}
		}
		live := 0
		for _, w := range hostsWorkers(op) {
			live += w.Runs
		}
		return done >= 4 && live > 0, fmt.Sprintf("%d done, %d runs live", done, live)
	})
	stoppedAt := time.Now()
	primary.stop()
	n.cut(hp)
	standby.promote()
	promotedAt := time.Now()
	t.Logf("primary stopped and standby promoted in %v", promotedAt.Sub(stoppedAt).Round(time.Millisecond))

	// A new command's connections go to the first host that accepts
	// writes, the dead primary given up within 5 s.
	probeStart := time.Now()
	op.ok("enqueue", "--id", "probe", "--", "true")
	if took := time.Since(probeStart); took > 8*time.Second {
		t.Errorf("cq enqueue after the failover took %v, want at most the 5 s connection timeout on the dead primary and a start", took)
	} else {
		t.Logf("cq enqueue after the failover took %v", took.Round(time.Millisecond))
	}

	// The producer goes on through the promoted standby (each cq command
	// pays the 5 s on the dead primary, so slowly).
	var after []string
	eventually(t, 40*time.Second, "tasks enqueued after the promotion run", func() (bool, string) {
		mu.Lock()
		after = after[:0]
		for _, a := range acked {
			if a.at.After(promotedAt) {
				after = append(after, a.id)
			}
		}
		mu.Unlock()
		if len(after) < 4 {
			return false, fmt.Sprintf("%d acknowledged after the promotion", len(after))
		}
		return true, ""
	})
	close(stopProducing)
	producer.Wait()
	mu.Lock()
	ids := []string{"probe"}
	for _, a := range acked {
		ids = append(ids, a.id)
	}
	t.Logf("%d enqueues acknowledged (%d after the promotion), %d not", len(acked), len(after), len(refused))
	for i, a := range refused {
		if i < 5 {
			t.Logf("not acknowledged %v after the stop: %s", a.at.Sub(stoppedAt).Round(time.Millisecond), a.err)
		}
	}
	mu.Unlock()
	op.waitAll(ids, 80*time.Second)
	t.Logf("every acknowledged task done %v after the promotion", time.Since(promotedAt).Round(time.Millisecond))
	stopHB()

	count := map[string]int{}
	for _, task := range op.tasks() {
		count[task.ID]++
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Errorf("acknowledged task %s is stored %d times", id, count[id])
		}
	}
	again := hostsCheckMarks(t, marks, ids[1:], false)
	failed := 0
	ended := map[string]string{} // run → the kind of the event that ended it
	for _, ev := range op.events() {
		switch ev.Kind {
		case "run.failed":
			failed++
			ended[strOf(ev.RunID)] = ev.Kind
		case "run.succeeded":
			ended[strOf(ev.RunID)] = ev.Kind
		}
	}
	t.Logf("%d tasks started more than once, %d run.failed events", again, failed)
	for _, h := range hosts {
		w := workers[h.name]
		// A run the worker gave up: how the store ended it.
		for _, line := range w.linesOf("run.lost") {
			var l struct {
				Run string `json:"run"`
			}
			_ = json.Unmarshal([]byte(line), &l)
			if ended[l.Run] == "run.succeeded" {
				// Its end was recorded: a renewal refused for that is
				// no lost lease (and its group must not be killed again).
				t.Errorf("worker on %s gave up run %s, which it had ended (%s)", h.name, l.Run, ended[l.Run])
			} else {
				t.Logf("worker on %s gave up run %s, which the store ended with %s", h.name, l.Run, ended[l.Run])
			}
		}
		w.alive()
		t.Logf("worker on %s: %d store errors, %d runs lost:\n%s", h.name, w.logged("store.error"), w.logged("run.lost"),
			strings.Join(w.linesOf("store.error", "run.lost"), "\n"))
		w.stop()
	}
	t.Logf("total %v", time.Since(begin).Round(time.Millisecond))
}

// startWorker starts cq worker ARGS on host h, under h's host name, with
// e's environment, entered into h's namespaces: the pid is the worker's
// own (ip netns exec, unshare and sh exec in turn).
func (h *netHost) startWorker(e *wkEnv, args ...string) *wkWorker {
	e.t.Helper()
	return e.startWorkerArgv(h.name, h.named(append([]string{"cq", "worker"}, args...)...))
}
