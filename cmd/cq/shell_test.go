package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// complete runs cobra's completion request (what the shells' scripts run
// on each Tab press) and returns the candidates without their
// descriptions, and the directive line.
func (e *cqEnv) complete(args ...string) (words []string, directive string) {
	e.t.Helper()
	out, _, code := e.run(append([]string{"__complete"}, args...)...)
	if code != 0 {
		e.t.Fatalf("cq __complete %s: exit %d", strings.Join(args, " "), code)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, l := range lines[:len(lines)-1] {
		w, _, _ := strings.Cut(l, "\t")
		words = append(words, w)
	}
	return words, lines[len(lines)-1]
}

// TestCompletion: a Tab press offers task ids (not yet terminal first,
// newest first, the typed prefix applied, ids already given left out),
// queues, states, priorities and output formats, from the store as it
// is, which it leaves as it was.
func TestCompletion(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	id := func(args ...string) string { return strings.TrimSpace(e.ok(append([]string{"enqueue"}, args...)...)) }
	ended := id("--", "false")
	e.ok("cancel", ended)
	older := id("--queue", "build", "--", "make", "all")
	held := id("--hold", "--", "true")
	newest := id("--", "false")
	e.ok("cancel", newest)

	words, dir := e.complete("show", "")
	if want := []string{held, older, newest, ended}; !slices.Equal(words, want) || dir != ":36" {
		t.Errorf("show <Tab>: got %v %s, want %v :36 (not yet terminal first, newest first, in that order)", words, dir, want)
	}
	out, _, _ := e.run("__complete", "show", held)
	if want := held + "\tblocked true\n"; !strings.HasPrefix(out, want) {
		t.Errorf("show %s<Tab>: got %q, want it to start with %q", held, out, want)
	}
	if words, _ := e.complete("show", older[:len(older)-1]); !slices.Equal(words, []string{older}) {
		t.Errorf("show PREFIX<Tab>: got %v, want %v", words, []string{older})
	}
	if words, _ := e.complete("cancel", held, ""); slices.Contains(words, held) || len(words) != 3 {
		t.Errorf("cancel %s <Tab>: got %v, want the three other ids", held, words)
	}
	if words, _ := e.complete("show", held, ""); len(words) != 0 {
		t.Errorf("show ID <Tab>: got %v, want nothing (show takes one id)", words)
	}
	if words, dir := e.complete("enqueue", "--", ""); len(words) != 0 || dir != ":0" {
		t.Errorf("enqueue -- <Tab>: got %v %s, want file names (the command's words), no ids", words, dir)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"ls", "--queue", ""}, []string{"build", "default"}},
		{[]string{"worker", "--queue", "b"}, []string{"build"}},
		{[]string{"queue", "pause", ""}, []string{"build", "default"}},
		{[]string{"ls", "--state", ""}, []string{"inbox", "todo", "blocked", "doing", "done", "failed", "cancelled"}},
		{[]string{"ls", "--state", "todo,d"}, []string{"todo,doing", "todo,done"}},
		{[]string{"task", "set-state", held, ""}, []string{"todo", "blocked", "cancelled"}},
		{[]string{"enqueue", "--priority", ""}, []string{"P0", "P1", "P2", "P3"}},
		{[]string{"ls", "-o", ""}, []string{"table", "json", "jsonl"}},
		{[]string{"health", "-o", ""}, []string{"table", "json", "jsonl", "prometheus"}},
	} {
		if got, _ := e.complete(c.args...); !slices.Equal(got, c.want) {
			t.Errorf("%s<Tab>: got %v, want %v", strings.Join(c.args, " "), got, c.want)
		}
	}
}

// TestCompletionChangesNothing: completion reads the store without
// changing a byte of it, and on a home that does not exist offers nothing
// and creates nothing, there or beside a --db.
func TestCompletionChangesNothing(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--", "true")
	snapshot := func() map[string]string {
		files := map[string]string{}
		ents, err := os.ReadDir(e.home)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			b, err := os.ReadFile(filepath.Join(e.home, ent.Name()))
			if err == nil {
				files[ent.Name()] = string(b)
			}
		}
		return files
	}
	before := snapshot()
	e.ok("--quiet", "enqueue", "--spool", "--", "true") // a spooled line completion must not drain
	spooled := snapshot()
	if words, _ := e.complete("show", ""); len(words) != 1 {
		t.Errorf("show <Tab>: got %v, want the one stored id", words)
	}
	after := snapshot()
	for name, b := range spooled {
		// The -shm is SQLite's shared index of the -wal, where every
		// reader marks what it reads; the store is the file and its -wal.
		if after[name] != b && !strings.HasSuffix(name, "-shm") {
			t.Errorf("%s changed under completion", name)
		}
	}
	if len(after) != len(spooled) || len(before) == 0 {
		t.Errorf("home files: %d before completion, %d after", len(spooled), len(after))
	}

	missing := filepath.Join(e.dir, "nothing", "home")
	if words, dir := e.complete("--home", missing, "show", ""); len(words) != 0 || dir != ":4" {
		t.Errorf("show <Tab> on a home that does not exist: got %v %s, want nothing, :4", words, dir)
	}
	if words, _ := e.complete("--db", filepath.Join(e.dir, "nothing", "cq.db"), "ls", "--queue", ""); len(words) != 0 {
		t.Errorf("--queue <Tab> on a store that does not exist: got %v, want nothing", words)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "nothing")); !os.IsNotExist(err) {
		t.Errorf("completion created %s (stat: %v)", filepath.Join(e.dir, "nothing"), err)
	}
}

// TestManPages: make man's generator (a cq built with the man tag) writes
// a page for cq and for each command, with their flags.
func TestManPages(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH to build the man page generator")
	}
	dir := t.TempDir()
	cmd := exec.Command(goTool, "run", "-tags", "man", ".", "__man", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run -tags man . __man: %v\n%s", err, out)
	}
	for page, want := range map[string]string{
		"cq.1":                 "cq - A durable job queue",
		"cq-worker.1":          `\fB--log-format\fP`,
		"cq-ls.1":              `sqlite://<home>/cq.db`,
		"cq-completion-bash.1": "bash",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not contain %q:\n%s", page, want, b)
		}
	}
}

// TestWorkerLogFormats: on a terminal the worker's log is text (coloured,
// unless NO_COLOR), not JSON, and --log-format json gives JSON back;
// piped it stays one JSON object per line, and --log-format text gives
// text without colour.
func TestWorkerLogFormats(t *testing.T) {
	t.Parallel()
	e := newCQEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--", "true")
	out, code := runPTY(t, e.env, e.dir, 120, 40, "worker", "--once")
	if code != 0 || strings.Contains(out, `{"time"`) || !strings.Contains(out, "worker.started") ||
		!strings.Contains(out, "run.finished") || !strings.Contains(out, "\x1b[") {
		t.Errorf("cq worker --once on a terminal: exit %d, want coloured text lines, got:\n%q", code, out)
	}
	e.ok("enqueue", "--", "true")
	out, code = runPTY(t, append(e.env, "NO_COLOR=1"), e.dir, 120, 40, "worker", "--once")
	if code != 0 || strings.Contains(out, "\x1b[") || !strings.Contains(out, "run.finished") {
		t.Errorf("NO_COLOR=1 cq worker --once on a terminal: exit %d, want text without colour, got:\n%q", code, out)
	}
	e.ok("enqueue", "--", "true")
	out, code = runPTY(t, e.env, e.dir, 120, 40, "worker", "--once", "--log-format", "json")
	if code != 0 || !strings.HasPrefix(out, `{"time"`) || !json.Valid([]byte(strings.SplitN(out, "\n", 2)[0])) {
		t.Errorf("cq worker --once --log-format json on a terminal: exit %d, want JSON lines, got:\n%q", code, out)
	}

	e.ok("enqueue", "--", "true")
	_, errs, code := e.run("worker", "--once")
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["time"] == nil || v["msg"] == nil {
			t.Errorf("piped cq worker --once: line %q is not a JSON log line (%v)", l, err)
		}
	}
	if code != 0 || len(lines) < 3 {
		t.Errorf("piped cq worker --once: exit %d, %d lines:\n%s", code, len(lines), errs)
	}
	e.ok("enqueue", "--", "true")
	_, errs, code = e.run("worker", "--once", "--log-format", "text")
	if code != 0 || strings.Contains(errs, "{") || strings.Contains(errs, "\x1b[") || !bytes.Contains([]byte(errs), []byte("INF run.finished")) {
		t.Errorf("piped cq worker --once --log-format text: exit %d, want plain text, got:\n%q", code, errs)
	}
	if _, errs, code := e.run("worker", "--log-format", "xml"); code != 1 || errs != "cq: --log-format: invalid format \"xml\" (want text or json)\n" {
		t.Errorf("cq worker --log-format xml: exit %d, stderr %q", code, errs)
	}
}
