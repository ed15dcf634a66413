package main

// Fault tests: a store that can be read but not written, a disk that
// fills up under the store, and producers and workers SIGKILLed at random
// moments. Each drives the real binary and is bounded in time.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultHome is a cq environment whose processes may run as another user
// (cred) from a copy of the binary that user can run (bin).
type faultHome struct {
	*cqEnv
	bin  string
	cred *syscall.Credential
}

// newFaultHome is a cq environment whose home is home.
func newFaultHome(t *testing.T, home string) *faultHome {
	t.Helper()
	e := newCQEnv(t, 60*time.Second, true)
	e.home = home
	for i, kv := range e.env {
		if strings.HasPrefix(kv, "CQ_HOME=") {
			e.env[i] = "CQ_HOME=" + home
		}
	}
	bin, err := exec.LookPath("cq")
	if err != nil {
		t.Fatal(err)
	}
	return &faultHome{cqEnv: e, bin: bin}
}

// runFor runs one cq command to its end, killing it after timeout; a cq
// that outlives timeout fails the test.
func (f *faultHome) runFor(timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env, cmd.Dir = f.env, f.dir
	if f.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		f.t.Fatalf("cq %s: did not end within %v; stderr %q", strings.Join(args, " "), timeout, errb.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		f.t.Fatalf("cq %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// snapshot is every file of the home but the -shm (which readers write
// by design) with a hash of its content, for proving nothing changed.
func (f *faultHome) snapshot() map[string]string {
	f.t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(f.home, func(p string, d os.DirEntry, err error) error {
		if err != nil || strings.HasSuffix(p, "-shm") {
			return err
		}
		rel, _ := filepath.Rel(f.home, p)
		if d.IsDir() {
			files[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return files
}

// mountTmpfs mounts a tmpfs of size at dir for the test, or skips it.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Busy (a process of the test still has a file open): detach
			// it, so the mount goes with the last file.
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// remount mounts dir again read-only (ro) or read-write.
func remount(t *testing.T, dir string, ro bool) {
	t.Helper()
	opt := "remount,rw"
	if ro {
		opt = "remount,ro"
	}
	if out, err := exec.Command("mount", "-o", opt, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -o %s %s: %v %s", opt, dir, err, bytes.TrimSpace(out))
	}
}

// closeCleanly opens the store and closes it as the last connection,
// which checkpoints the WAL into the file and deletes the -wal and -shm:
// a store left so by a clean shutdown.
func closeCleanly(t *testing.T, path string) {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatalf("%s-wal is still there after the last connection closed", path)
	}
}

// TestReadOnlyStore: on a store cq can read but not write (a read-only
// mount, with and without its -wal file; a database file of mode 0400),
// cq worker and cq worker --once exit 1 at start naming the store and
// saying it is read-only, before anything is claimed or created; cq
// enqueue says so in one line of words (not SQLite's); cq ls, show,
// events and health still read it; and no file of the home changes.
func TestReadOnlyStore(t *testing.T) {
	t.Run("mount", func(t *testing.T) {
		t.Parallel()
		mnt := filepath.Join(t.TempDir(), "mnt")
		mountTmpfs(t, mnt, "16m")
		f := newFaultHome(t, filepath.Join(mnt, "home"))
		ids := faultEnqueue(f, 3)
		remount(t, mnt, true)
		checkReadOnly(t, f, ids)
	})
	t.Run("mount-without-wal", func(t *testing.T) {
		t.Parallel()
		mnt := filepath.Join(t.TempDir(), "mnt")
		mountTmpfs(t, mnt, "16m")
		f := newFaultHome(t, filepath.Join(mnt, "home"))
		ids := faultEnqueue(f, 3)
		closeCleanly(t, filepath.Join(f.home, "cq.db"))
		remount(t, mnt, true)
		checkReadOnly(t, f, ids)
	})
	t.Run("file-mode-0400", func(t *testing.T) {
		t.Parallel()
		f := unprivilegedHome(t)
		ids := faultEnqueue(f, 3)
		if err := os.Chmod(filepath.Join(f.home, "cq.db"), 0o400); err != nil {
			t.Fatal(err)
		}
		checkReadOnly(t, f, ids)
	})
}

// unprivilegedHome is a home that permissions bind: as root (whom file
// modes do not stop), its cq processes run as the user nobody, from a
// copy of the binary in a folder nobody can reach; otherwise as the
// test's own user.
func unprivilegedHome(t *testing.T) *faultHome {
	t.Helper()
	if os.Geteuid() != 0 {
		return newFaultHome(t, filepath.Join(t.TempDir(), "home"))
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to run cq as (root ignores file modes): %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	base, err := os.MkdirTemp("", "cq-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	work := filepath.Join(base, "work")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	f := newFaultHome(t, filepath.Join(work, "home"))
	bin := filepath.Join(base, "cq")
	if err := copyFile(f.bin, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	f.bin, f.dir = bin, work
	f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	// nobody's processes get a HOME of theirs, and no coverage folder
	// they could not write (its warnings would be stderr lines).
	f.env = slices.DeleteFunc(f.env, func(kv string) bool {
		return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "GOCOVERDIR=")
	})
	f.env = append(f.env, "HOME="+work)
	return f
}

func copyFile(from, to string, perm os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// faultEnqueue enqueues n tasks that would write a file if they ran, and
// returns their ids.
func faultEnqueue(f *faultHome, n int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		out, errs, code := f.runFor(30*time.Second, "enqueue", "--shell", fmt.Sprintf("echo ran > ran-%d", i))
		if code != 0 || errs != "" {
			f.t.Fatalf("cq enqueue: exit %d, stderr %q", code, errs)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	return ids
}

// checkReadOnly is TestReadOnlyStore's verdict on f's read-only store,
// which holds the tasks ids.
func checkReadOnly(t *testing.T, f *faultHome, ids []string) {
	path := filepath.Join(f.home, "cq.db")
	before := f.snapshot()
	// Bounded: a worker that retried its claim for ever would be killed
	// here and fail the test.
	for _, args := range [][]string{{"worker"}, {"worker", "--once"}} {
		_, errs, code := f.runFor(30*time.Second, args...)
		last := lastLine(errs)
		if code != 1 || !strings.HasPrefix(last, "cq: the store "+path+" is read-only: ") {
			t.Errorf("cq %s: exit %d, last stderr line %q; want 1 and \"cq: the store %s is read-only: …\"\nstderr:\n%s",
				strings.Join(args, " "), code, last, path, errs)
		}
		if strings.Contains(errs, "worker.started") || strings.Contains(errs, "run.started") {
			t.Errorf("cq %s started on a read-only store:\n%s", strings.Join(args, " "), errs)
		}
	}
	_, errs, code := f.runFor(30*time.Second, "enqueue", "--", "true")
	if code != 1 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "cq: the store "+path+" is read-only: ") ||
		strings.Contains(errs, "readonly database") {
		t.Errorf("cq enqueue: exit %d, stderr %q; want 1 and one line saying the store %s is read-only", code, errs, path)
	}
	out, errs, code := f.runFor(30*time.Second, "ls", "-q", "--limit", "0")
	got := strings.Fields(out)
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if code != 0 || errs != "" || !slices.Equal(got, want) {
		t.Errorf("cq ls -q: exit %d, stderr %q, ids %v; want 0, nothing on stderr, %v", code, errs, got, want)
	}
	out, errs, code = f.runFor(30*time.Second, "show", "-o", "json", ids[0])
	var task struct{ ID, State string }
	if code != 0 || errs != "" || json.Unmarshal([]byte(out), &task) != nil || task.ID != ids[0] || task.State != "todo" {
		t.Errorf("cq show %s: exit %d, stderr %q, stdout %q; want the task, todo", ids[0], code, errs, out)
	}
	out, errs, code = f.runFor(30*time.Second, "events")
	if code != 0 || errs != "" || strings.Count(out, `"kind":"task.created"`) != len(ids) {
		t.Errorf("cq events: exit %d, stderr %q, stdout %q; want 0 and the %d tasks' events", code, errs, out, len(ids))
	}
	out, errs, code = f.runFor(30*time.Second, "health", "-o", "json")
	var h struct {
		Status  string `json:"status"`
		Backlog int    `json:"backlog"`
	}
	if code > 2 || errs != "" || json.Unmarshal([]byte(out), &h) != nil || h.Backlog != len(ids) {
		t.Errorf("cq health -o json: exit %d, stderr %q, stdout %q; want a verdict with backlog %d", code, errs, out, len(ids))
	}
	after := f.snapshot()
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s changed on the read-only store", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was created on the read-only store", name)
		}
	}
	for i := range ids {
		if _, err := os.Stat(filepath.Join(f.dir, fmt.Sprintf("ran-%d", i))); err == nil {
			t.Errorf("task %d ran on the read-only store", i)
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestDiskFull fills, for real, the device holding the store (a small
// tmpfs, most of it taken by a filler file) with enqueues: each one
// either succeeds, and its task is stored, or exits 1 with one line that
// says the device is full (not SQLite's words) and stores nothing. The
// full store still reads; once the filler is deleted, a worker runs
// every acknowledged task.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	mnt := filepath.Join(t.TempDir(), "mnt")
	// Room, once the filler is gone, for a worker's WAL, which grows up
	// to 16 MiB between checkpoints under a steady stream of commits.
	mountTmpfs(t, mnt, "32m")
	f := newFaultHome(t, filepath.Join(mnt, "home"))
	path := filepath.Join(f.home, "cq.db")
	if _, errs, code := f.runFor(30*time.Second, "heartbeat"); code != 0 {
		t.Fatalf("cq heartbeat: exit %d, stderr %q", code, errs)
	}
	// The filler leaves the store about 2 MiB: some dozens of enqueues.
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, free-(2<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Commands of 6 KB fill the store in fewer enqueues; true ignores them.
	pad := strings.Repeat("x", 6000)
	var acked, refused []string
	deadline := time.Now().Add(40 * time.Second)
	for i := 0; len(refused) < 5; i++ {
		if time.Now().After(deadline) || i == 1000 {
			t.Fatalf("the store never filled the device: %d enqueues acknowledged in %d tries", len(acked), i)
		}
		id := fmt.Sprintf("t%04d", i)
		out, errs, code := f.runFor(30*time.Second, "enqueue", "--id", id, "--", "true", pad)
		switch {
		case code == 0 && strings.TrimSpace(out) == id && errs == "":
			acked = append(acked, id)
		case code == 1 && out == "" && strings.Count(errs, "\n") == 1 &&
			strings.HasPrefix(errs, "cq: no space left on the device holding the store "+path) &&
			!strings.Contains(errs, "database or disk is full"):
			refused = append(refused, id)
		default:
			t.Fatalf("cq enqueue --id %s on a filling disk: exit %d, stdout %q, stderr %q; want 0 and the id, or 1 and one line saying the device is full",
				id, code, out, errs)
		}
	}
	if len(acked) == 0 {
		t.Fatal("no enqueue was acknowledged before the device was full")
	}
	t.Logf("%d enqueues acknowledged, then refused: %v", len(acked), refused)
	listed := func(args ...string) []string {
		out, errs, code := f.runFor(30*time.Second, append([]string{"ls", "-q", "--limit", "0"}, args...)...)
		if code != 0 || errs != "" {
			t.Fatalf("cq ls %v: exit %d, stderr %q", args, code, errs)
		}
		ids := strings.Fields(out)
		slices.Sort(ids)
		return ids
	}
	// Still full: the store reads, holding exactly what was acknowledged.
	if got := listed(); !slices.Equal(got, acked) {
		t.Fatalf("the full store lists %d tasks %v, want the %d acknowledged %v", len(got), got, len(acked), acked)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	_, errs, code := f.runFor(50*time.Second, "worker", "--once", "--concurrency", "4")
	if code != 0 {
		t.Fatalf("cq worker --once after space was freed: exit %d\nstderr:\n%s", code, errs)
	}
	if got := listed("--state", "done"); !slices.Equal(got, acked) {
		t.Errorf("done after the worker: %d tasks %v, want the %d acknowledged %v", len(got), got, len(acked), acked)
	}
}

// TestSIGKILLStorm: producers (cq enqueue, and cq enqueue --spool) and
// cq worker processes on one home (and store, testDB's) are SIGKILLed at random moments and
// started again, for a bounded number of rounds. Then every enqueue
// that was acknowledged (exit 0, its id printed) names a task stored
// exactly once, which ends done; no task ran twice at the same time (each
// run marks its start and end in the task's file, with its CQ_RUN_ID);
// and no process of a run, nor any other cq process, survives.
func TestSIGKILLStorm(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, false)
	marks := e.path("marks")
	if err := os.Mkdir(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	// A lost run is retried as transient: enough budget that no task
	// fails for having been lost many times.
	if _, errs, code := e.run("queue", "set", "default", "--transient-retries", "1000"); code != 0 {
		t.Fatalf("cq queue set: exit %d, stderr %q", code, errs)
	}
	// $0 is the marks folder and $1 how long the run lasts: no shell
	// string is built from data. The end is marked by a grandchild, which
	// only the kill of the run's whole process group stops: one that
	// outlived its worker would mark an end after the next run's start.
	const script = `echo "start $CQ_RUN_ID" >> "$0/$CQ_TASK_ID"; ` +
		`sh -c 'sleep "$1"; echo "end $CQ_RUN_ID" >> "$0/$CQ_TASK_ID"' "$0" "$1"`
	begin := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var producers sync.WaitGroup
	for p := range 3 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			// Bounded, and spread over the storm: every task runs for
			// 0.2 s, and the final worker runs what the storm left.
			for n := range 40 {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(rng.IntN(150)) * time.Millisecond):
				}
				// One task in six outlasts a lease (3 s), so that a run
				// whose worker died could still be there when the task
				// runs again.
				last := "0.2"
				if n%6 == 5 {
					last = "4"
				}
				args := []string{"enqueue", "--", "sh", "-c", script, marks, last}
				if n%2 == 1 {
					args = append([]string{"enqueue", "--spool"}, args[1:]...)
				}
				out, code := stormRun(e, time.Duration(rng.IntN(150))*time.Millisecond, args...)
				if id := strings.TrimSpace(out); code == 0 && id != "" {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				}
			}
		}()
	}
	var workers sync.WaitGroup
	for w := range 3 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			for range 4 {
				life := time.Duration(400+rng.IntN(1100)) * time.Millisecond
				stormRun(e, life, "worker", "--lease", "3s", "--concurrency", "2")
			}
		}()
	}
	workers.Wait()
	close(stop)
	producers.Wait()
	if len(acked) == 0 {
		t.Fatal("no enqueue was acknowledged during the storm")
	}
	t.Logf("%d enqueues acknowledged; storm over after %v", len(acked), time.Since(begin).Round(time.Millisecond))

	// The runs the killed workers left expire (3 s leases) and are
	// reaped; those backing off start now; a worker runs what is left.
	states := map[string]int{}
	eventually(t, 40*time.Second, "every acknowledged task done", func() (bool, string) {
		if _, errs, code := e.run("heartbeat"); code != 0 {
			return false, fmt.Sprintf("cq heartbeat: exit %d, stderr %q", code, errs)
		}
		tasks, err := stormTasks(e)
		if err != nil {
			return false, err.Error()
		}
		clear(states)
		var again []string
		for _, tk := range tasks {
			states[tk.ID]++
			if tk.State == "blocked" || tk.State == "failed" {
				again = append(again, tk.ID)
			}
		}
		if len(again) > 0 {
			if _, errs, code := e.run(append([]string{"retry"}, again...)...); code != 0 {
				return false, fmt.Sprintf("cq retry: exit %d, stderr %q", code, errs)
			}
		}
		if _, errs, code := e.run("worker", "--once", "--lease", "3s", "--concurrency", "32"); code != 0 {
			return false, fmt.Sprintf("cq worker --once: exit %d, stderr %q", code, errs)
		}
		if tasks, err = stormTasks(e); err != nil {
			return false, err.Error()
		}
		done := map[string]bool{}
		for _, tk := range tasks {
			done[tk.ID] = tk.State == "done"
		}
		for _, id := range acked {
			if !done[id] {
				out, _, _ := e.run("show", "-o", "json", id)
				return false, fmt.Sprintf("acknowledged task %s is not done: %s", id, out)
			}
		}
		return true, ""
	})
	t.Logf("all done after %v", time.Since(begin).Round(time.Millisecond))
	tasks, err := stormTasks(e)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, tk := range tasks {
		count[tk.ID]++
	}
	for _, id := range acked {
		if count[id] != 1 {
			t.Errorf("acknowledged task %s is stored %d times", id, count[id])
		}
	}
	ents, err := os.ReadDir(marks)
	if err != nil {
		t.Fatal(err)
	}
	cut := 0
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(marks, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if err := runsOverlap(strings.Split(strings.TrimSpace(text), "\n")); err != nil {
			t.Errorf("task %s: %v\n%s", ent.Name(), err, b)
		}
		cut += strings.Count(text, "start ") - strings.Count(text, "end ")
	}
	// The storm's premise: some runs were cut short with their worker.
	t.Logf("%d runs of %d tasks cut short", cut, len(ents))
	if cut == 0 {
		t.Error("no run was cut short: the storm killed no worker mid-run")
	}
	// The supervisors of the killed workers kill their runs at once; a
	// moment is allowed for the signals to land, less than a long run.
	eventually(t, 2*time.Second, "no process of the home left", func() (bool, string) {
		pids := homeProcs(e.home)
		return len(pids) == 0, wkDescribeProcs(pids)
	})
}

// stormRun runs one cq command and SIGKILLs it after life unless it has
// ended; it returns its stdout and exit code (-1 when killed).
func stormRun(e *cqEnv, life time.Duration, args ...string) (string, int) {
	cmd := exec.Command("cq", args...)
	cmd.Env, cmd.Dir = e.env, e.dir
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return "", -1
	}
	kill := time.AfterFunc(life, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	kill.Stop()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	return out.String(), -1
}

// stormTask is what TestSIGKILLStorm reads of a task.
type stormTask struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func stormTasks(e *cqEnv) ([]stormTask, error) {
	out, errs, code := e.run("ls", "-o", "json", "--limit", "0")
	if code != 0 {
		return nil, fmt.Errorf("cq ls: exit %d, stderr %q", code, errs)
	}
	var tasks []stormTask
	if err := json.Unmarshal([]byte(out), &tasks); err != nil {
		return nil, fmt.Errorf("cq ls -o json: %w", err)
	}
	return tasks, nil
}

// runsOverlap checks a task's marks, "start RUN" and "end RUN" lines in
// the order they were written: a run that ends after another run of the
// task started, or a run that ends twice or never started, ran beside
// another. A run that never ends was killed (its worker was).
func runsOverlap(lines []string) error {
	open := ""                      // the run started last, not ended yet
	superseded := map[string]bool{} // runs another started after
	ended := map[string]bool{}
	for _, l := range lines {
		what, run, _ := strings.Cut(l, " ")
		switch what {
		case "start":
			if open != "" {
				superseded[open] = true
			}
			open = run
		case "end":
			switch {
			case superseded[run]:
				return fmt.Errorf("run %s ended after another run of the task started", run)
			case run != open || ended[run]:
				return fmt.Errorf("run %s ended without being the one running", run)
			}
			ended[run], open = true, ""
		default:
			return fmt.Errorf("unexpected mark %q", l)
		}
	}
	return nil
}

// TestRunsOverlapCatches: the storm's check of the marks finds runs of
// one task that overlapped, and accepts runs one after another, a killed
// one included.
func TestRunsOverlapCatches(t *testing.T) {
	ok := [][]string{
		{"start a", "end a"},
		{"start a", "start b", "end b"},
		{"start a", "end a", "start b", "start c", "end c"},
	}
	for _, lines := range ok {
		if err := runsOverlap(lines); err != nil {
			t.Errorf("%q: %v", lines, err)
		}
	}
	bad := [][]string{
		{"start a", "start b", "end a"},
		{"start a", "start b", "end b", "end a"},
		{"start a", "end a", "end a"},
		{"end a"},
	}
	for _, lines := range bad {
		if runsOverlap(lines) == nil {
			t.Errorf("%q: overlap not reported", lines)
		}
	}
}

// homeProcs lists the live processes (zombies excluded) whose environment
// names home as CQ_HOME: workers, their supervisors and their runs.
func homeProcs(home string) []int {
	want := []byte("CQ_HOME=" + home)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		if f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:]); len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X') {
			continue
		}
		env, err := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if err != nil {
			continue
		}
		if slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			pids = append(pids, pid)
		}
	}
	return pids
}
