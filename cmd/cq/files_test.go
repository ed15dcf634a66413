package main

// Where cq expects a file or folder of its own in its home (the spool,
// its lock and rejected file, the database and its sides, the runs
// folder), a symbolic link, a FIFO or a device is refused with one line
// and exit 1, and what a link points at is left as it was
// (docs/failure-modes.md). These tests run the real binary with a deadline: a FIFO opened
// without care would block it for good.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// victimContent is what a file outside the home holds, mode 0644, before
// a link in the home is made to point at it.
const victimContent = "not cq's: keep me\n"

// outsideFile makes a file outside the home with victimContent (or the
// content given) and mode 0644, and returns its path and a check that
// it is still so.
func outsideFile(t *testing.T, content ...string) (string, func(when string)) {
	t.Helper()
	want := victimContent
	if len(content) > 0 {
		want = content[0]
	}
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, func(when string) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: the link's target is now %v (%v), want a 0644 file", when, fi.Mode(), err)
		}
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s: the link's target now holds %q, want %q", when, b, want)
		}
	}
}

// plant puts a link to a file outside the home, or a FIFO, at
// home/name. The returned check says the link's target, or the FIFO, is
// as it was.
func plant(t *testing.T, home, name, kind string) func(when string) {
	t.Helper()
	p := filepath.Join(home, name)
	switch kind {
	case "symlink":
		target, check := outsideFile(t)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return func(when string) {
			t.Helper()
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s: %s is no longer the link (%v)", when, name, err)
			}
			check(when)
		}
	case "fifo":
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		return func(when string) {
			t.Helper()
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("%s: %s is no longer the FIFO (%v)", when, name, err)
			}
		}
	}
	t.Fatalf("unknown kind %q", kind)
	return nil
}

// refusal is the one line cq prints for path, what it is instead.
func refusal(path, what string) string {
	return "cq: refusing to use " + path + ": it is " + what + " (cq's own files must be regular files)\n"
}

var kindName = map[string]string{"symlink": "a symbolic link", "fifo": "a FIFO"}

// TestRefusesSpoolFilesNotItsOwn: a link (to a 0644 file outside the
// home) or a FIFO as queue.jsonl, queue.lock or queue.rejected.jsonl is
// refused by every command that would use it, with exit 1 and one line
// naming it; the link's target keeps its content and mode, the spool
// keeps its lines, and no command hangs on a FIFO.
func TestRefusesSpoolFilesNotItsOwn(t *testing.T) {
	const goodLine = `{"id":"spooled","cmd":["true"],"cwd":"/"}` + "\n"
	files := []struct {
		name string
		// spool is what queue.jsonl holds beforehand, when it is not the
		// file under test: a line to drain, or (for the rejected file) an
		// unterminated one that every reader and appender moves there.
		spool string
	}{
		{"queue.jsonl", ""},
		{"queue.lock", goodLine},
		{"queue.rejected.jsonl", "not json"},
	}
	commands := [][]string{
		{"ls", "-q"},
		{"enqueue", "--spool", "--", "true"},
		{"worker", "--once"},
		{"heartbeat"},
	}
	for _, f := range files {
		for _, kind := range []string{"symlink", "fifo"} {
			for _, args := range commands {
				t.Run(f.name+"/"+kind+"/"+args[0], func(t *testing.T) {
					e := newCQEnv(t, 20*time.Second, false)
					if err := os.MkdirAll(e.home, 0o700); err != nil {
						t.Fatal(err)
					}
					spool := filepath.Join(e.home, "queue.jsonl")
					if f.spool != "" {
						if err := os.WriteFile(spool, []byte(f.spool), 0o600); err != nil {
							t.Fatal(err)
						}
					}
					unchanged := plant(t, e.home, f.name, kind)
					out, errs, code := e.run(args...)
					if code != 1 || errs != refusal(filepath.Join(e.home, f.name), kindName[kind]) {
						t.Errorf("cq %s: exit %d, stderr %q, stdout %q; want exit 1 and the one line\n%s",
							strings.Join(args, " "), code, errs, out, refusal(filepath.Join(e.home, f.name), kindName[kind]))
					}
					unchanged("after cq " + args[0])
					if f.spool != "" {
						if b, _ := os.ReadFile(spool); string(b) != f.spool {
							t.Errorf("the spool holds %q after the refusal, want %q as before", b, f.spool)
						}
					}
				})
			}
		}
	}
}

// TestRefusesStoreFilesNotItsOwn: a link or a FIFO as cq.db, cq.db-wal or
// cq.db-shm is refused before SQLite opens anything (SQLite follows a
// link at the database's path and blocks on a FIFO), with exit 1 and one
// line; a link to the database is refused with the hint to give its real
// path, which then works.
func TestRefusesStoreFilesNotItsOwn(t *testing.T) {
	for _, name := range []string{"cq.db", "cq.db-wal", "cq.db-shm"} {
		for _, kind := range []string{"symlink", "fifo"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				e := newCQEnv(t, 20*time.Second, false)
				if err := os.MkdirAll(e.home, 0o700); err != nil {
					t.Fatal(err)
				}
				unchanged := plant(t, e.home, name, kind)
				want := refusal(filepath.Join(e.home, name), kindName[kind])
				if name == "cq.db" && kind == "symlink" {
					want = strings.TrimSuffix(want, "\n") + "; give the database's real path with --db\n"
				}
				for _, args := range [][]string{{"ls", "-q"}, {"enqueue", "--", "true"}} {
					out, errs, code := e.run(args...)
					if code != 1 || errs != want {
						t.Errorf("cq %s: exit %d, stderr %q, stdout %q; want exit 1 and the one line\n%s", args[0], code, errs, out, want)
					}
					unchanged("after cq " + args[0])
				}
			})
		}
	}

	t.Run("empty database through a link, then by its real path", func(t *testing.T) {
		// An empty 0644 file is what cq would take for a new store and
		// make 0600: through a link, it must not.
		e := newCQEnv(t, 20*time.Second, false)
		if err := os.MkdirAll(e.home, 0o700); err != nil {
			t.Fatal(err)
		}
		target, unchanged := outsideFile(t, "")
		link := filepath.Join(e.home, "cq.db")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if out, errs, code := e.run("enqueue", "--", "true"); code != 1 || !strings.HasPrefix(errs, "cq: refusing to use "+link+": it is a symbolic link") {
			t.Errorf("cq enqueue through a linked cq.db: exit %d, stderr %q, stdout %q; want the refusal", code, errs, out)
		}
		unchanged("after cq enqueue")
		if _, err := os.Lstat(target + "-wal"); !os.IsNotExist(err) {
			t.Errorf("a -wal was made beside the link's target: %v", err)
		}
		if out, errs, code := e.run("--db", target, "enqueue", "--", "true"); code != 0 || errs != "" {
			t.Errorf("cq --db REALPATH enqueue: exit %d, stderr %q, stdout %q; want it to work", code, errs, out)
		}
	})
}

// TestWorkerLockFilesNotItsOwn: a link as the store's -holders file or
// its -workers folder does not stop a worker (it says why it goes
// without them, once) and nothing is written through the link.
func TestWorkerLockFilesNotItsOwn(t *testing.T) {
	e := newCQEnv(t, 30*time.Second, false)
	e.ok("enqueue", "--id", "t1", "--", "true")
	holders := filepath.Join(e.home, "cq.db-holders")
	workers := filepath.Join(e.home, "cq.db-workers")
	for _, p := range []string{holders, workers} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	target, unchanged := outsideFile(t)
	if err := os.Symlink(target, holders); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, workers); err != nil {
		t.Fatal(err)
	}
	out, errs, code := e.run("worker", "--once")
	if code != 0 {
		t.Fatalf("cq worker --once: exit %d, stderr %s, stdout %q", code, errs, out)
	}
	for _, want := range []string{
		"refusing to use " + holders + ": it is a symbolic link",
		"refusing to use " + workers + ": it is a symbolic link",
	} {
		if strings.Count(errs, want) != 1 {
			t.Errorf("worker log has %d lines saying %q, want 1:\n%s", strings.Count(errs, want), want, errs)
		}
	}
	var task struct{ State string }
	if got := e.ok("show", "t1", "-o", "json"); json.Unmarshal([]byte(got), &task) != nil || task.State != "done" {
		t.Errorf("task t1 did not run: %s", got)
	}
	unchanged("after cq worker")
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the -workers link's target got %d entries", len(ents))
	}
}

// TestRunsFolderNotItsOwn: a link as the home's runs folder is not
// written through: a run goes on with its output lost, and says why.
func TestRunsFolderNotItsOwn(t *testing.T) {
	e := newCQEnv(t, 30*time.Second, false)
	e.ok("enqueue", "--id", "t1", "--", "echo", "hello")
	runs := filepath.Join(e.home, "runs")
	if err := os.RemoveAll(runs); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, runs); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := e.run("worker", "--once"); code != 0 {
		t.Fatalf("cq worker --once: exit %d, stderr %s, stdout %q", code, errs, out)
	}
	var task struct {
		State string
		Runs  []struct{ State, Error string }
	}
	if err := json.Unmarshal([]byte(e.ok("show", "t1", "-o", "json")), &task); err != nil {
		t.Fatal(err)
	}
	if task.State != "done" || len(task.Runs) != 1 || task.Runs[0].State != "succeeded" {
		t.Fatalf("task %+v: want done, its one run succeeded", task)
	}
	if want := "output lost: run folder: refusing to use " + runs + ": it is a symbolic link"; !strings.Contains(task.Runs[0].Error, want) {
		t.Errorf("run error %q does not say %q", task.Runs[0].Error, want)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the runs link's target got %d entries", len(ents))
	}
}

// TestWorkerGoesOnPastARefusedSpool: a worker that meets a link as its
// spool while it runs logs the refusal once and goes on claiming and
// running what the store holds; nothing is written through the link.
func TestWorkerGoesOnPastARefusedSpool(t *testing.T) {
	e := opsNewEnv(t)
	e.ok("ls")
	w := e.startWorker("--concurrency", "1")
	eventually(t, 30*time.Second, "the worker started", func() (bool, string) {
		return strings.Contains(w.stderr.String(), "worker.started") || w.exited(), w.stderr.String()
	})
	target, unchanged := outsideFile(t)
	spool := filepath.Join(e.home, "queue.jsonl")
	_ = os.Remove(spool)
	if err := os.Symlink(target, spool); err != nil {
		t.Fatal(err)
	}
	want := "refusing to use " + spool + ": it is a symbolic link"
	eventually(t, 30*time.Second, "the worker logging the refused spool", func() (bool, string) {
		return strings.Contains(w.stderr.String(), want) || w.exited(), w.stderr.String()
	})
	// A task stored meanwhile by another home's command (cq's own home
	// refuses every command while the link is there) is run all the same.
	other := filepath.Join(e.dir, "other-home")
	out, errs, code := e.run("--home", other, "--db", filepath.Join(e.home, "cq.db"), "enqueue", "--id", "after", "--", "true")
	if code != 0 {
		t.Fatalf("enqueue from another home: exit %d, stderr %q, stdout %q", code, errs, out)
	}
	eventually(t, 30*time.Second, "task after done", func() (bool, string) {
		o, _, _ := e.run("--home", other, "--db", filepath.Join(e.home, "cq.db"), "show", "after", "-o", "json")
		var task struct{ State string }
		_ = json.Unmarshal([]byte(o), &task)
		return task.State == "done" || w.exited(), o
	})
	if w.exited() {
		t.Fatalf("the worker exited: %v\n%s", w.err, w.stderr.String())
	}
	if n := strings.Count(w.stderr.String(), want); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, w.stderr.String())
	}
	unchanged("while the worker runs")
}

// TestRejectedLineKeepsItsBytes: a spool line that is not valid UTF-8 is
// rejected with line_base64, whose bytes are the line's exactly.
func TestRejectedLineKeepsItsBytes(t *testing.T) {
	e := newCQEnv(t, 20*time.Second, false)
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := []byte("{\"id\":\"w1\",\"cmd\":[\"\xff\xfe\"],\"cwd\":\"/\"}")
	if err := os.WriteFile(filepath.Join(e.home, "queue.jsonl"), append(append([]byte{}, bad...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := e.run("heartbeat"); code != 0 || errs != "" {
		t.Fatalf("cq heartbeat: exit %d, stderr %q", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(e.home, "queue.rejected.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var rej map[string]string
	if err := json.Unmarshal(b, &rej); err != nil {
		t.Fatalf("rejected file %q: %v", b, err)
	}
	if _, ok := rej["line"]; ok || len(rej) != 3 || rej["at"] == "" || rej["error"] == "" {
		t.Fatalf("rejected entry %q: want at, error and line_base64 only", b)
	}
	got, err := base64.StdEncoding.DecodeString(rej["line_base64"])
	if err != nil || string(got) != string(bad) {
		t.Fatalf("line_base64 decodes to %q (%v), want the line's bytes %q", got, err, bad)
	}
}

// TestOtherHomeFilesNotItsOwn: a FIFO as heartbeat.lock, as a dead
// cleanup's cleanup-PID.pending or as a run's stdout.log blocks nothing:
// cq heartbeat refuses its lock, cq cleanup passes the pending file by,
// and cq logs refuses the log, each at once.
func TestOtherHomeFilesNotItsOwn(t *testing.T) {
	e := newCQEnv(t, 20*time.Second, false)
	e.ok("enqueue", "--id", "t1", "--", "echo", "hello")
	if out, errs, code := e.run("worker", "--once"); code != 0 {
		t.Fatalf("cq worker --once: exit %d, stderr %s, stdout %q", code, errs, out)
	}
	if out := e.ok("logs", "t1"); out != "hello\n" {
		t.Fatalf("cq logs t1: %q, want hello", out)
	}

	lock := filepath.Join(e.home, "heartbeat.lock")
	_ = os.Remove(lock)
	plant(t, e.home, "heartbeat.lock", "fifo")
	if out, errs, code := e.run("heartbeat"); code != 1 || errs != refusal(lock, "a FIFO") {
		t.Errorf("cq heartbeat: exit %d, stderr %q, stdout %q; want exit 1 and %q", code, errs, out, refusal(lock, "a FIFO"))
	}

	// A pid above any pid_max: that cleanup is gone.
	plant(t, e.home, "cleanup-999999999.pending", "fifo")
	if out, errs, code := e.run("cleanup"); code != 0 {
		t.Errorf("cq cleanup: exit %d, stderr %q, stdout %q; want it to pass the FIFO by", code, errs, out)
	}

	var task struct{ Runs []struct{ ID string } }
	if err := json.Unmarshal([]byte(e.ok("show", "t1", "-o", "json")), &task); err != nil || len(task.Runs) != 1 {
		t.Fatalf("cq show t1: %+v, %v", task, err)
	}
	log := filepath.Join(e.home, "runs", task.Runs[0].ID, "stdout.log")
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	plant(t, filepath.Dir(log), "stdout.log", "fifo")
	if out, errs, code := e.run("logs", "t1"); code != 1 || errs != refusal(log, "a FIFO") {
		t.Errorf("cq logs t1: exit %d, stderr %q, stdout %q; want exit 1 and %q", code, errs, out, refusal(log, "a FIFO"))
	}
}
