package home_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cq-dev/cq/internal/home"
)

// TestWorkerGone: a worker is gone once its lock file's flock is free
// (its process died), and only then; a worker with no lock file, or one
// of two lock files of an id still held, is never reported gone; each
// death is reported once.
func TestWorkerGone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cq.db")
	if home.WorkerGone(path, "h:1") {
		t.Fatal("a worker with no lock file reported gone")
	}
	release, err := home.HoldWorker(path, "h:1")
	if err != nil {
		t.Fatal(err)
	}
	if home.WorkerGone(path, "h:1") {
		t.Fatal("a worker holding its lock reported gone")
	}
	if st, err := os.Stat(path + "-workers"); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("workers folder: %v, %v; want 0700", st, err)
	}
	ents, _ := os.ReadDir(path + "-workers")
	if len(ents) != 1 {
		t.Fatalf("lock files: %v, want one", ents)
	}
	lock := filepath.Join(path+"-workers", ents[0].Name())
	if st, _ := os.Stat(lock); st.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, want 0600", st.Mode().Perm())
	}
	release()
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("release left the lock file: %v", err)
	}

	// A worker that died: its file is there, its lock free.
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !home.WorkerGone(path, "h:1") {
		t.Fatal("a dead worker's lock file not reported gone")
	}
	if home.WorkerGone(path, "h:1") {
		t.Error("a death reported twice")
	}

	// The same id in another pid namespace, still alive: not gone.
	other := filepath.Join(path+"-workers", "h:1@999.lock")
	f, err := os.OpenFile(other, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if home.WorkerGone(path, "h:1") {
		t.Error("reported gone while another lock file of the id is held")
	}
	if home.WorkerGone(path, "h:10") || home.WorkerGone(path, "h:") {
		t.Error("another id's lock file counted")
	}
	// The sweep removes the dead worker's file and keeps the held one.
	if n := home.SweepWorkerLocks(path); n != 1 {
		t.Errorf("sweep removed %d lock files, want 1", n)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("the dead worker's lock file is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the live worker's lock file is gone: %v", err)
	}
}
