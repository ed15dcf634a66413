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
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	mountTmpfs(t, mnt, "8m")
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
