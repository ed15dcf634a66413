package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsWorker is one line of cq workers -o json.
type wsWorker struct {
	ID          string   `json:"id"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Queues      []string `json:"queues"`
	Concurrency int      `json:"concurrency"`
	Runs        int      `json:"runs"`
	StartedAt   string   `json:"started_at"`
	LastSeen    string   `json:"last_seen"`
}

// liveWorkers is cq workers -o json, by pid.
func (e *wkEnv) liveWorkers() map[int]wsWorker {
	e.t.Helper()
	var ws []wsWorker
	out := e.ok("workers", "-o", "json")
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		e.t.Fatalf("cq workers -o json: %v: %s", err, out)
	}
	m := map[int]wsWorker{}
	for _, w := range ws {
		m[w.PID] = w
	}
	return m
}

// TestWorkersListsLiveWorkers: cq workers lists every live cq worker
// process with its queues, concurrency and the runs it holds; one that
// stops cleanly is gone at once, one SIGKILLed once its lease TTL has
// passed without a sign of life.
func TestWorkersListsLiveWorkers(t *testing.T) {
	e := wkNewEnv(t)
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	out := e.ok("workers")
	if out != strings.Join(workerHeader, "\t")+"\n" {
		t.Fatalf("cq workers with no worker, piped: %q; want the header line alone", out)
	}

	a := e.startWorker("a", "--queue", "qa", "--queue", "qb", "--concurrency", "3", "--lease", "3s")
	e.ok("enqueue", "--id", "long", "--queue", "qa", "--", "sleep", "60")
	e.waitRunning("long", 1)
	b := e.startWorker("b", "--concurrency", "2")
	c := e.startWorker("c", "--queue", "qc", "--lease", "3s")
	pa, pb, pc := a.cmd.Process.Pid, b.cmd.Process.Pid, c.cmd.Process.Pid
	var ws map[int]wsWorker
	e.eventually(30*time.Second, "three workers listed, a holding its run", func() (bool, string) {
		ws = e.liveWorkers()
		_, okB := ws[pb]
		_, okC := ws[pc]
		return len(ws) == 3 && ws[pa].Runs == 1 && okB && okC, fmt.Sprint(ws)
	})
	rfc3339 := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)
	for _, want := range []wsWorker{
		{ID: fmt.Sprintf("%s:%d", host, pa), Host: host, PID: pa, Queues: []string{"qa", "qb"}, Concurrency: 3, Runs: 1},
		{ID: fmt.Sprintf("%s:%d", host, pb), Host: host, PID: pb, Queues: []string{}, Concurrency: 2},
		{ID: fmt.Sprintf("%s:%d", host, pc), Host: host, PID: pc, Queues: []string{"qc"}, Concurrency: 1},
	} {
		got := ws[want.PID]
		if got.ID != want.ID || got.Host != want.Host || !slices.Equal(got.Queues, want.Queues) || got.Queues == nil ||
			got.Concurrency != want.Concurrency || got.Runs != want.Runs {
			t.Errorf("worker %d: %+v; want %+v", want.PID, got, want)
		}
		if !rfc3339.MatchString(got.StartedAt) || !rfc3339.MatchString(got.LastSeen) || got.LastSeen < got.StartedAt {
			t.Errorf("worker %d: started_at %q, last_seen %q; want RFC 3339 UTC times, last seen not before started", want.PID, got.StartedAt, got.LastSeen)
		}
	}
	// The raw JSON has exactly the documented fields, queues an array.
	var raw []map[string]any
	if err := json.Unmarshal([]byte(e.ok("workers", "-o", "json")), &raw); err != nil || len(raw) != 3 {
		t.Fatalf("cq workers -o json: %v, %d objects", err, len(raw))
	}
	for _, o := range raw {
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"concurrency", "host", "id", "last_seen", "pid", "queues", "runs", "started_at"}; !slices.Equal(keys, want) {
			t.Errorf("cq workers -o json object keys %v, want %v", keys, want)
		}
	}
	// Piped: tab-separated with the header; QUEUES is all for b.
	lines := strings.Split(strings.TrimSuffix(e.ok("workers"), "\n"), "\n")
	if len(lines) != 4 || lines[0] != "ID\tHOST\tPID\tQUEUES\tCONC\tRUNS\tSTARTED\tLAST SEEN" {
		t.Fatalf("cq workers piped: %q", lines)
	}
	rowOf := map[int]string{}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) != 8 {
			t.Fatalf("cq workers row %q: %d cells, want 8", l, len(f))
		}
		pid, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("cq workers row %q: PID %q is not a number", l, f[2])
		}
		rowOf[pid] = strings.Join(f[:6], "\t")
	}
	for pid, want := range map[int]string{
		pa: fmt.Sprintf("%s:%d\t%s\t%d\tqa,qb\t3\t1", host, pa, host, pa),
		pb: fmt.Sprintf("%s:%d\t%s\t%d\tall\t2\t0", host, pb, host, pb),
		pc: fmt.Sprintf("%s:%d\t%s\t%d\tqc\t1\t0", host, pc, host, pc),
	} {
		if rowOf[pid] != want {
			t.Errorf("cq workers row of %d: %q, want %q…", pid, rowOf[pid], want)
		}
	}
	ids := strings.Fields(e.ok("workers", "-q"))
	slices.Sort(ids)
	wantIDs := []string{ws[pa].ID, ws[pb].ID, ws[pc].ID}
	slices.Sort(wantIDs)
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("cq workers -q: %v, want %v", ids, wantIDs)
	}
	jl := strings.Split(strings.TrimSpace(e.ok("workers", "-o", "jsonl")), "\n")
	if len(jl) != 3 || !json.Valid([]byte(jl[0])) {
		t.Errorf("cq workers -o jsonl: %q, want 3 JSON lines", jl)
	}

	// A clean stop takes the worker off the list at once.
	b.stop()
	if ws := e.liveWorkers(); len(ws) != 2 || ws[pb].PID != 0 {
		t.Errorf("after b stopped: %v; want a and c", ws)
	}
	// SIGKILL says nothing: c is listed until its 3 s lease has passed.
	c.signal(syscall.SIGKILL)
	c.wait(30 * time.Second)
	e.eventually(30*time.Second, "c no longer live", func() (bool, string) {
		ws := e.liveWorkers()
		_, listed := ws[pc]
		return !listed && len(ws) == 1, fmt.Sprint(ws)
	})
	if ws := e.liveWorkers(); ws[pa].Runs != 1 {
		t.Errorf("a after the others went: %+v; want it live with its run", ws[pa])
	}
	e.ok("cancel", "long")
	a.stop()
	if ws := e.liveWorkers(); len(ws) != 0 {
		t.Errorf("after every worker stopped: %v", ws)
	}
}

// TestHealthWarnsWhenNoWorkerIsLive: cq health warns when tasks are
// runnable and no worker is live, with the verdict unchanged, and stops
// once a worker lives (here one of another queue, so that the task stays
// runnable), and warns again once it stopped.
func TestHealthWarnsWhenNoWorkerIsLive(t *testing.T) {
	e := wkNewEnv(t)
	const warning = "2 tasks runnable and no worker is live (start one: cq worker)"
	e.ok("enqueue", "--", "true")
	e.ok("enqueue", "--", "true")
	e.ok("heartbeat")
	health := func() (warnings []string, status string) {
		out, errs, code := e.run("health", "-o", "json")
		var h struct {
			Status   string   `json:"status"`
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(out), &h); err != nil || errs != "" {
			t.Fatalf("cq health -o json: exit %d, %v, stderr %q", code, err, errs)
		}
		if code != 0 || h.Status != "ok" {
			t.Fatalf("cq health: exit %d, status %s; want 0, ok (the warning leaves the verdict)", code, h.Status)
		}
		return h.Warnings, h.Status
	}
	if w, _ := health(); !slices.Equal(w, []string{warning}) {
		t.Fatalf("no worker: warnings %q, want [%q]", w, warning)
	}
	if out := e.ok("health"); !strings.Contains(out, "warning\t"+warning+"\n") {
		t.Errorf("cq health table lacks the warning line:\n%s", out)
	}
	w := e.startWorker("other", "--queue", "other")
	e.eventually(30*time.Second, "the warning gone with a worker live", func() (bool, string) {
		ws, _ := health()
		return len(ws) == 0, fmt.Sprint(ws)
	})
	w.stop()
	if ws, _ := health(); !slices.Equal(ws, []string{warning}) {
		t.Fatalf("worker stopped: warnings %q, want [%q]", ws, warning)
	}
}

// TestEnqueueHintsAtAWorkerOnATerminal: on a terminal, cq enqueue with no
// live worker says once on stderr how to start one (once per call, even
// for several tasks); never for a task left in inbox, never with a worker
// live, and never when stderr is not a terminal.
func TestEnqueueHintsAtAWorkerOnATerminal(t *testing.T) {
	e := wkNewEnv(t)
	hint := "cq: no worker is running; start one with: cq worker\n"
	pty := func(args ...string) string {
		t.Helper()
		out, code := runPTY(t, e.env, e.dir, 100, 30, args...)
		if code != 0 {
			t.Fatalf("cq %s on a pty: exit %d: %q", strings.Join(args, " "), code, out)
		}
		return out
	}
	idLine := regexp.MustCompile(`^[0-9a-z]{26}\n`)
	if out := pty("enqueue", "--", "true"); !idLine.MatchString(out) || strings.TrimPrefix(out, idLine.FindString(out)) != hint {
		t.Errorf("cq enqueue on a pty: %q; want the id, then %q", out, hint)
	}
	if out := pty("enqueue", "--hold", "--", "true"); strings.Count(out, hint) != 1 {
		t.Errorf("cq enqueue --hold on a pty (blocked): %q; want the hint once", out)
	}
	if err := os.WriteFile(e.path("batch.jsonl"), []byte(`{"cmd":["true"]}`+"\n"+`{"cmd":["true"]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := pty("enqueue", "--batch", "-f", "batch.jsonl"); strings.Count(out, hint) != 1 || strings.Count(out, "\n") != 3 {
		t.Errorf("cq enqueue --batch of 2 on a pty: %q; want 2 ids and the hint once", out)
	}
	// Into inbox: nothing to run yet, so no hint; taken in, two at once:
	// one hint.
	i1 := strings.TrimSpace(e.ok("task", "create", "--", "true"))
	i2 := strings.TrimSpace(e.ok("task", "create", "--", "true"))
	if out := pty("task", "create", "--", "true"); strings.Contains(out, "worker") {
		t.Errorf("cq task create on a pty: %q; want no hint", out)
	}
	if out := pty("enqueue", i1, i2); out != i1+"\n"+i2+"\n"+hint {
		t.Errorf("cq enqueue ID ID on a pty: %q; want both ids, then the hint once", out)
	}
	// Piped, never: a script's stderr stays empty on success.
	if out, errs, code := e.run("enqueue", "--", "true"); code != 0 || errs != "" || !idLine.MatchString(out) {
		t.Errorf("cq enqueue piped: exit %d, stdout %q, stderr %q; want the id and an empty stderr", code, out, errs)
	}
	// With a worker live, no hint.
	w := e.startWorker("w", "--queue", "elsewhere")
	e.eventually(30*time.Second, "the worker listed", func() (bool, string) {
		out := e.ok("workers", "-q")
		return out != "", out
	})
	if out := pty("enqueue", "--", "true"); strings.Contains(out, "worker") || !idLine.MatchString(out) {
		t.Errorf("cq enqueue on a pty with a worker live: %q; want the id alone", out)
	}
	w.stop()
}
