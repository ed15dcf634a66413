// Package scripts holds runnable examples; these tests run each one
// against a freshly built cq so that none can go stale.
package scripts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var cqBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cq-examples")
	if err != nil {
		panic(err)
	}
	cqBin = filepath.Join(dir, "cq")
	build := exec.Command("go", "build", "-o", cqBin, "github.com/cq-dev/cq/cmd/cq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic("building cq: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// script runs an example with a private home and returns its output.
func script(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./"+name, args...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+filepath.Join(t.TempDir(), "home"), "CQ="+cqBin,
		"PATH="+filepath.Dir(cqBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	// A background process the script left behind must not hold the test
	// hostage through the output pipe.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestDemo(t *testing.T) {
	t.Parallel()
	out, err := script(t, nil, "demo.sh", cqBin)
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"deploying", "no luck", "succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestCIPipeline(t *testing.T) {
	t.Parallel()
	out, err := script(t, []string{"CQ_PIPELINE_WORKER=1"}, "ci-pipeline.sh", "main", "3")
	if err != nil {
		t.Fatalf("ci-pipeline.sh: %v\n%s", err, out)
	}
	want := "shard 1 ok\nshard 2 ok\nshard 3 ok\n"
	if !strings.Contains(out, want) {
		t.Fatalf("pipeline report = %q, want it to hold %q", out, want)
	}
}

// With no worker, the pipeline exits with cq wait's 124 once its timeout
// passes (not with cq logs' 4 for a report that never ran).
func TestCIPipelineTimeout(t *testing.T) {
	t.Parallel()
	out, err := script(t, []string{"CQ_PIPELINE_TIMEOUT=1s"}, "ci-pipeline.sh", "main", "2")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Fatalf("ci-pipeline.sh without a worker: %v, want exit 124\n%s", err, out)
	}
}

func TestHandlers(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	work := t.TempDir()
	src := filepath.Join(work, "site")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "index.html"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	cq := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cqBin, args...)
		cmd.Env = append(os.Environ(), "CQ_HOME="+home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cq %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	dest := filepath.Join(work, "site.tgz")
	log := filepath.Join(work, "notes.log")
	archive := cq("enqueue", "--intent", "archive", "--payload", `{"src":"`+src+`","dest":"`+dest+`"}`)
	notify := cq("enqueue", "--intent", "notify", "--payload", `{"log":"`+log+`","text":"archived"}`, "--after", archive)
	missing := cq("enqueue", "--intent", "nosuch")
	handlers, _ := filepath.Abs("handlers")
	cq("worker", "--once", "--handlers", handlers)
	if st, err := os.Stat(dest); err != nil || st.Size() == 0 {
		t.Fatalf("archive produced no tarball: %v", err)
	}
	if out := cq("logs", archive); !strings.Contains(out, "archived "+src) {
		t.Fatalf("archive output %q", out)
	}
	notes, err := os.ReadFile(log)
	if err != nil || string(notes) != notify+" archived\n" {
		t.Fatalf("notify log = %q, %v", notes, err)
	}
	// A missing handler fails the run and is not retried.
	if st := cq("show", missing, "-o", "json"); !strings.Contains(st, `"state": "failed"`) || !strings.Contains(st, "missing handler") {
		t.Fatalf("task with a missing handler: %s", st)
	}
}

// cqAt runs the built cq with a home and returns its stdout.
func cqAt(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command(cqBin, args...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cq %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func TestEventsToWebhook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []int64
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ Seq int64 }
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad event", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if fail {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		got = append(got, ev.Seq)
	}))
	defer srv.Close()
	home := filepath.Join(t.TempDir(), "home")
	seqFile := filepath.Join(t.TempDir(), "seq")
	for i := 0; i < 3; i++ {
		cqAt(t, home, "enqueue", "--", "true")
	}
	runSync := func() error {
		cmd := exec.Command("./events-to-webhook.sh", srv.URL, seqFile)
		cmd.Env = append(os.Environ(), "CQ_HOME="+home, "CQ="+cqBin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := runSync(); err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 2, 3, 4, 5, 6} // created + todo for each task
	mu.Lock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	mu.Unlock()
	// Nothing new: nothing sent again.
	if err := runSync(); err != nil {
		t.Fatal(err)
	}
	// The webhook is down: the script fails and does not advance.
	cqAt(t, home, "enqueue", "--", "true")
	mu.Lock()
	fail = true
	mu.Unlock()
	var ee *exec.ExitError
	if err := runSync(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sync with the webhook down: %v, want exit 1 as its header says", err)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := runSync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(append(want, 7, 8)) {
		t.Fatalf("after an outage delivered %v, want each event once, in order", got)
	}
	if b, _ := os.ReadFile(seqFile); strings.TrimSpace(string(b)) != "8" {
		t.Fatalf("seq file = %q, want 8", b)
	}
}

// cronCommands returns the commands of the crontab's job lines.
func cronCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("crontab")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || strings.HasPrefix(line, "#") || strings.Contains(f[0], "=") {
			continue
		}
		cmds = append(cmds, strings.Join(f[5:], " "))
	}
	return cmds
}

func TestCrontab(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	textfiles := t.TempDir()
	id := cqAt(t, home, "enqueue", "--", "true")
	cqAt(t, home, "worker", "--once")
	cmds := cronCommands(t)
	if len(cmds) != 4 {
		t.Fatalf("crontab has %d jobs, want heartbeat, cleanup, health and an --ok-if-active enqueue: %q", len(cmds), cmds)
	}
	// The enqueue job twice: the second finds the first's task active.
	cmds = append(cmds, cmds[3])
	for _, c := range cmds {
		c = strings.ReplaceAll(c, "/usr/local/bin/cq", cqBin)
		c = strings.ReplaceAll(c, "/var/lib/node_exporter/textfile", textfiles)
		// Retention 0 so that the cleanup job has something to do.
		c = strings.Replace(c, cqBin+" cleanup", cqBin+" cleanup --done 0s", 1)
		cmd := exec.Command("/bin/sh", "-c", c)
		cmd.Env = append(os.Environ(), "CQ_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Fatalf("cron job %q: %v, printed %q (cron would mail it)", c, err, out)
		}
	}
	prom, err := os.ReadFile(filepath.Join(textfiles, "cq.prom"))
	if err != nil || !strings.Contains(string(prom), "cq_health_status") || !strings.Contains(string(prom), "cq_last_heartbeat_timestamp_seconds 1") {
		t.Fatalf("textfile = %q, %v", prom, err)
	}
	if out := cqAt(t, home, "ls", "-q", "--limit", "0"); strings.Contains(out, id) {
		t.Fatalf("cleanup job left done task %s", id)
	}
	if out := cqAt(t, home, "ls", "-q", "--key", "mirror-sync"); len(strings.Fields(out)) != 1 {
		t.Fatalf("the --ok-if-active job, run twice, stored %q; want one task", out)
	}
}

func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("cq-worker.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = v
		}
	}
	if unit["KillMode"] != "mixed" {
		t.Fatalf("KillMode = %q, want mixed (SIGTERM to the worker only)", unit["KillMode"])
	}
	argv := strings.Fields(unit["ExecStart"])
	grace := 10 * time.Second
	for i, a := range argv {
		if a == "--grace" && i+1 < len(argv) {
			if grace, err = time.ParseDuration(argv[i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop, err := time.ParseDuration(unit["TimeoutStopSec"] + "s")
	if err != nil || stop <= grace+3*time.Second {
		t.Fatalf("TimeoutStopSec %v must exceed --grace %v + 3s", stop, grace)
	}
	// Run the unit's command as systemd would and stop it the same way: a
	// task still running at the end of a (shortened) grace is released.
	home := filepath.Join(t.TempDir(), "home")
	id := cqAt(t, home, "enqueue", "--", "sleep", "60")
	argv[0] = cqBin
	for i, a := range argv {
		if a == "--grace" {
			argv[i+1] = "1s"
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+home)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(cqAt(t, home, "show", id, "-o", "json"), `"state": "doing"`) {
		if time.Now().After(deadline) {
			t.Fatal("the worker never started the task")
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v, want 0", err)
	}
	if took := time.Since(start); took > 1*time.Second+3*time.Second+2*time.Second {
		t.Fatalf("stop took %v, want within --grace + 3s", took)
	}
	if out := cqAt(t, home, "show", id, "-o", "json"); !strings.Contains(out, `"state": "todo"`) || !strings.Contains(out, `"reason": "released"`) {
		t.Fatalf("task after stop: %s", out)
	}
}

// exampleCmd prepares an example script run on home with the built cq,
// in a process group of its own (killGroup stops it with its children).
func exampleCmd(home, name string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("./"+name, args...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+home, "CQ="+cqBin)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// killGroup stops cmd's process group with sig and waits for cmd.
func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	_ = cmd.Wait()
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond every 20ms until it holds, failing the test with
// what it last described after 30s.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s; last seen: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStateFollow(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("state-follow.sh needs jq")
	}
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	cqAt(t, home, "enqueue", "--id", "a", "--", "true")
	cqAt(t, home, "enqueue", "--id", "b", "--hold", "--", "true")
	cqAt(t, home, "enqueue", "--id", "c", "--", "true")
	cqAt(t, home, "cancel", "c")

	// Following: the snapshot's tasks (not ended, oldest first), then
	// each change of a task's state, once.
	cmd := exampleCmd(home, "state-follow.sh", nil)
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer killGroup(cmd, syscall.SIGKILL)
	lines := func(n int) func() (bool, string) {
		return func() (bool, string) {
			s := out.String()
			return strings.Count(s, "\n") >= n, fmt.Sprintf("%q, stderr %q", s, errb.String())
		}
	}
	waitFor(t, "the snapshot's lines", lines(2))
	cqAt(t, home, "cancel", "a")
	cqAt(t, home, "release", "b")
	cqAt(t, home, "hold", "b")
	cqAt(t, home, "hold", "b") // held already: no change of state
	cqAt(t, home, "task", "set", "b", "--priority", "P0")
	cqAt(t, home, "enqueue", "--id", "d", "--", "true")
	waitFor(t, "the changes", lines(7))
	want := "a\ttodo\nb\tblocked\na\tcancelled\nb\ttodo\nb\tblocked\nd\tinbox\nd\ttodo\n"
	if got := out.String(); got != want {
		t.Fatalf("state-follow.sh printed %q, want %q (stderr %q)", got, want, errb.String())
	}
	killGroup(cmd, syscall.SIGTERM)
	if errb.String() != "" {
		t.Errorf("stderr %q", errb.String())
	}

	// One pass (SYNC_FOLLOW=0), every task: the snapshot alone, as
	// nothing changed since.
	one := exampleCmd(home, "state-follow.sh", []string{"SYNC_FOLLOW=0"}, "--all")
	got, err := one.CombinedOutput()
	if err != nil || string(got) != "a\tcancelled\nb\tblocked\nc\tcancelled\nd\ttodo\n" {
		t.Fatalf("state-follow.sh --all, one pass: %v, printed %q", err, got)
	}
}

func TestDrainDeploy(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	work := t.TempDir()
	file := func(name string) string { return filepath.Join(work, name) }
	there := func(name string) func() (bool, string) {
		return func() (bool, string) {
			_, err := os.Stat(file(name))
			return err == nil, "no " + name
		}
	}
	paused := func() bool {
		var qs []struct {
			Name   string
			Paused bool
		}
		if err := json.Unmarshal([]byte(cqAt(t, home, "queue", "ls", "-o", "json")), &qs); err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == "web" {
				return q.Paused
			}
		}
		return false
	}
	worker := exec.Command(cqBin, "worker", "--concurrency", "2", "--grace", "1s")
	worker.Env = append(os.Environ(), "CQ_HOME="+home)
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(file("stop"), nil, 0o600)
		_ = worker.Process.Signal(syscall.SIGTERM)
		_ = worker.Wait()
	}()
	cqAt(t, home, "enqueue", "--id", "slow", "--queue", "web", "--cwd", work, "--shell",
		"touch slow-started; while [ ! -e release ]; do sleep 0.05; done; touch slow-ended")
	waitFor(t, "slow started", there("slow-started"))

	// The drain waits for slow; the deploy step finds it ended.
	deploy := exampleCmd(home, "drain-deploy.sh", nil, "web", "sh", "-c", `test -e "$1/slow-ended" && touch "$1/deployed"`, "sh", work)
	var out lockedBuffer
	deploy.Stdout, deploy.Stderr = &out, &out
	if err := deploy.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "queue web paused", func() (bool, string) { return paused(), "not paused" })
	// Enqueued while the queue drains: it waits, and runs after the deploy.
	next := cqAt(t, home, "enqueue", "--queue", "web", "--cwd", work, "--", "test", "-e", "deployed")
	if st := cqAt(t, home, "show", next, "-o", "json"); !strings.Contains(st, `"state": "todo"`) {
		t.Fatalf("a task enqueued into the paused queue: %s", st)
	}
	if err := os.WriteFile(file("release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := deploy.Wait(); err != nil {
		t.Fatalf("drain-deploy.sh: %v\n%s", err, out.String())
	}
	if ok, _ := there("deployed")(); !ok || out.String() != "" {
		t.Fatalf("drain-deploy.sh deployed nothing, or printed %q", out.String())
	}
	if paused() {
		t.Fatal("queue web is still paused after the deploy")
	}
	cqAt(t, home, "wait", "--timeout", "30s", next) // exit 0: it ran after the deploy, and found it

	// A run that does not end in time: 124, nothing deployed, the queue
	// resumed all the same.
	stuck := cqAt(t, home, "enqueue", "--queue", "web", "--cwd", work, "--shell",
		"touch stuck-started; while [ ! -e stop ]; do sleep 0.05; done")
	waitFor(t, "stuck started", there("stuck-started"))
	late := exampleCmd(home, "drain-deploy.sh", []string{"DRAIN_TIMEOUT=1s"}, "web", "touch", file("deployed-late"))
	got, err := late.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Fatalf("drain-deploy.sh with a run that does not end: %v, want exit 124\n%s", err, got)
	}
	if !strings.Contains(string(got), "task "+stuck+" is still active") || !strings.Contains(string(got), "nothing deployed") {
		t.Errorf("drain-deploy.sh output %q: want the stuck task named, and nothing deployed", got)
	}
	if ok, _ := there("deployed-late")(); ok {
		t.Error("drain-deploy.sh deployed although the queue did not drain")
	}
	if paused() {
		t.Error("queue web is still paused after a drain that timed out")
	}
}
