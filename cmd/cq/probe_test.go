package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWorkerProbe: probe tasks (--probe, docs/semantics.md, Probes) run
// once whatever their failure, are never retried though their queue has a
// budget in every class, are left out of cq health's run figures, and are
// logged by the worker at Info with probe=true; they are still recorded
// and shown. An ordinary failing task beside them is retried and counted.
func TestWorkerProbe(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("queue", "set", "default", "--retries", "2", "--backoff", "1h")
	e.ok("heartbeat")
	e.ok("enqueue", "--id", "ok", "--", "true")
	e.ok("enqueue", "--id", "plain", "--", "false")
	e.ok("enqueue", "--id", "probe", "--probe", "--", "false")
	e.ok("enqueue", "--id", "probe75", "--probe", "--shell", "exit 75")
	e.batch([]map[string]any{{"id": "bprobe", "probe": true, "cmd": []string{"false"}}})

	// --once: every task runs once and the worker exits (a retry's
	// backoff is not waited for).
	w := e.startWorker("w", "--once")
	if code := w.wait(60 * time.Second); code != 0 {
		t.Fatalf("cq worker --once exited %d; stderr:\n%s", code, w.stderr.String())
	}
	w.checkLog()

	for _, id := range []string{"probe", "probe75", "bprobe"} {
		tk := e.show(id)
		if tk.State != "failed" || tk.Attempts != 1 || len(tk.Runs) != 1 || tk.Runs[0].State != "failed" {
			t.Errorf("probe %s: %v; want failed after one failed run", id, tk)
		}
	}
	if tk := e.show("plain"); tk.State != "blocked" || strOf(tk.BlockedReason) != "retry" || tk.Attempts != 1 {
		t.Errorf("the same task without --probe: %v; want blocked for a retry", tk)
	}
	if tk := e.show("ok"); tk.State != "done" {
		t.Errorf("ok: %v", tk)
	}

	// Shown: "probe" in cq ls and cq show, as JSON and as a table.
	var all []map[string]any
	if err := json.Unmarshal([]byte(e.ok("ls", "-o", "json", "--limit", "0")), &all); err != nil {
		t.Fatal(err)
	}
	for _, tk := range all {
		want := strings.Contains(tk["id"].(string), "probe")
		if tk["probe"] != want {
			t.Errorf("cq ls -o json: task %v has probe %v, want %v", tk["id"], tk["probe"], want)
		}
	}
	if out := e.ok("show", "probe"); !strings.Contains(out, "\nprobe\ttrue\n") {
		t.Errorf("cq show probe, piped, has no probe true line:\n%s", out)
	}
	if out := e.ok("show", "plain"); !strings.Contains(out, "\nprobe\tfalse\n") {
		t.Errorf("cq show plain, piped, has no probe false line:\n%s", out)
	}

	// Health counts ok's success and plain's failure, none of the probes'.
	out, errs, code := e.run("health", "-o", "json")
	var h struct {
		SuccessRate  *float64       `json:"success_rate"`
		Failed24h    int            `json:"failed_24h"`
		RunsFinished map[string]int `json:"runs_finished"`
		States       map[string]int `json:"states"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("cq health -o json: exit %d, %v: %s %s", code, err, out, errs)
	}
	if h.SuccessRate == nil || *h.SuccessRate != 0.5 || h.Failed24h != 1 ||
		fmt.Sprint(h.RunsFinished) != "map[cancelled:0 failed:1 succeeded:1 timeout:0]" {
		t.Errorf("cq health: success rate %v, failed_24h %d, runs finished %v; want 0.5, 1, ok's and plain's runs alone",
			h.SuccessRate, h.Failed24h, h.RunsFinished)
	}
	if h.States["failed"] != 3 {
		t.Errorf("cq health: %d failed tasks, want the 3 probes (recorded)", h.States["failed"])
	}

	// The worker's log: each probe's end at Info with probe=true, nothing
	// about a probe above Info; the ordinary task's end has no probe mark.
	ids := map[string]string{}
	for _, id := range []string{"probe", "probe75", "bprobe", "plain"} {
		ids[e.show(id).Runs[0].ID] = id
	}
	finished := map[string]bool{}
	for _, l := range w.logLines() {
		id := ids[fmt.Sprint(l["run"])]
		if id == "" {
			continue
		}
		if strings.Contains(id, "probe") && l["level"] != "INFO" {
			t.Errorf("a probe's run logged at %v: %v", l["level"], l)
		}
		if l["msg"] != "run.finished" {
			continue
		}
		finished[id] = true
		if want := strings.Contains(id, "probe"); (l["probe"] == true) != want {
			t.Errorf("run.finished of %s: probe=%v, want %v: %v", id, l["probe"], want, l)
		}
	}
	if len(finished) != 4 {
		t.Errorf("run.finished lines for %v, want probe, probe75, bprobe and plain; log:\n%s", finished, w.stderr.String())
	}

	// Recorded: the probe's run and task ends are in the event log.
	var kinds []string
	for _, ev := range e.events() {
		if strOf(ev.TaskID) == "probe" {
			kinds = append(kinds, ev.Kind)
		}
	}
	if got := strings.Join(kinds, " "); !strings.Contains(got, "run.failed") || !strings.HasSuffix(got, "task.failed") {
		t.Errorf("the probe's events: %s; want its run.failed and task.failed", got)
	}
}
