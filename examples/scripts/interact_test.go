package scripts

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// home is a private cq home with a worker running on it, for examples
// that need one.
type home struct {
	t   *testing.T
	env []string
}

func newHome(t *testing.T) *home {
	t.Helper()
	h := &home{t: t}
	h.env = append(os.Environ(), "CQ_HOME="+filepath.Join(t.TempDir(), "home"), "CQ="+cqBin,
		"PATH="+filepath.Dir(cqBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return h
}

// cq runs cq and returns its stdout; it fails the test unless cq exits 0.
func (h *home) cq(args ...string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cqBin, args...)
	cmd.Env = h.env
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("cq %s: %v\n%s%s", strings.Join(args, " "), err, out, errb.String())
	}
	return string(out)
}

// worker starts cq worker until the test ends.
func (h *home) worker() {
	h.t.Helper()
	cmd := exec.Command(cqBin, "worker", "--concurrency", "2")
	cmd.Env = h.env
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
}

// eventually polls cond for up to a minute.
func (h *home) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeployGate: the gated deploy waits for an operator; approved, it
// deploys; denied, it stops without deploying.
func TestDeployGate(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.worker()
	script, err := filepath.Abs("deploy-gate.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, approve := range []bool{true, false} {
		id := strings.TrimSpace(runOut(t, h, script, "enqueue", "1.2.3"))
		h.eventually("the deploy's question", func() bool { return strings.Contains(h.cq("asks", "-q"), id) })
		if !strings.Contains(h.cq("asks"), "deploy 1.2.3 to production?") {
			t.Errorf("cq asks does not show the question:\n%s", h.cq("asks"))
		}
		if approve {
			h.cq("answer", id, "--approve", "--reason", "LGTM")
		} else {
			h.cq("answer", id, "--deny", "--reason", "freeze")
		}
		wait := exec.Command(cqBin, "wait", "--timeout", "1m", id)
		wait.Env = h.env
		_ = wait.Run() // 1 for the denied one: its state is checked below
		var task struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(h.cq("show", "-o", "json", id)), &task); err != nil {
			t.Fatal(err)
		}
		logs := h.cq("logs", id)
		if approve {
			if task.State != "done" || !strings.Contains(logs, "approved: LGTM") || !strings.Contains(logs, "deployed 1.2.3") {
				t.Errorf("approved deploy: %s\n%s", task.State, logs)
			}
		} else if task.State != "failed" || !strings.Contains(logs, "not deployed") || strings.Contains(logs, "deploying") {
			t.Errorf("denied deploy: %s\n%s", task.State, logs)
		}
	}
}

// runOut runs an example script on h's home and returns its stdout.
func runOut(t *testing.T, h *home, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command(script, args...)
	cmd.Env = h.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", script, args, err)
	}
	return string(out)
}

// TestProgressJob: the job's progress shows in cq show while it runs and
// its last report is kept.
func TestProgressJob(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	script, err := filepath.Abs("progress-job.sh")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(h.cq("enqueue", "--", script, "15"))
	h.cq("worker", "--once")
	var task struct {
		State string `json:"state"`
		Runs  []struct {
			Progress *struct {
				Done    int64  `json:"done"`
				Total   int64  `json:"total"`
				Message string `json:"message"`
			} `json:"progress"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(h.cq("show", "-o", "json", id)), &task); err != nil {
		t.Fatal(err)
	}
	if task.State != "done" || len(task.Runs) != 1 || task.Runs[0].Progress == nil ||
		task.Runs[0].Progress.Done != 15 || task.Runs[0].Progress.Total != 15 || task.Runs[0].Progress.Message != "item 15" {
		t.Errorf("cq show: %+v", task)
	}
	if !strings.Contains(h.cq("logs", id), "processed 15 items") {
		t.Errorf("logs: %s", h.cq("logs", id))
	}
	if !strings.Contains(h.cq("events"), `"kind":"run.progress"`) {
		t.Errorf("no run.progress event")
	}
}
