package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// victim is a file outside the folder under test, with known content and
// mode, that a link points at: it must come out as it went in.
func victim(t *testing.T) (path string, check func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "victim")
	const content = "keep me\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Errorf("the link's target now holds %q (%v), want %q", b, err, content)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("the link's target's mode changed: %v %v", fi.Mode(), err)
		}
	}
}

// within runs fn and fails the test if it has not returned in 10 s: a
// FIFO opened without O_NONBLOCK would block it for good.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked after 10 s", what)
	}
}

func wantUnsafe(t *testing.T, err error, path, what string) {
	t.Helper()
	var ue *UnsafeError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v (%T), want an *UnsafeError", err, err)
	}
	if ue.Path != path || ue.What != what {
		t.Errorf("refused %s as %q, want %s as %q", ue.Path, ue.What, path, what)
	}
	if msg := err.Error(); !strings.Contains(msg, "refusing to use "+path+": it is "+what) || strings.Contains(msg, "\n") {
		t.Errorf("message %q: want one line naming the path and what it is", msg)
	}
}

// TestOpenPrivateRefusesWhatIsNotARegularFile: a symbolic link (to a file
// or to nothing), a FIFO, a device or a folder where cq expects its own
// file is refused, whatever the flags, and the link's target is neither
// written, truncated nor chmod'ed; a FIFO does not block the open.
func TestOpenPrivateRefusesWhatIsNotARegularFile(t *testing.T) {
	flags := map[string]int{
		"read":     os.O_RDONLY,
		"append":   os.O_WRONLY | os.O_APPEND,
		"truncate": os.O_WRONLY | os.O_TRUNC,
		"rdwr":     os.O_RDWR,
	}
	for name, flag := range flags {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			target, check := victim(t)

			link := filepath.Join(dir, "link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			_, err := OpenPrivate(link, flag)
			wantUnsafe(t, err, link, "a symbolic link")
			check()

			// A dangling link: nothing is created at its target.
			dangling := filepath.Join(dir, "dangling")
			nowhere := filepath.Join(t.TempDir(), "nowhere")
			if err := os.Symlink(nowhere, dangling); err != nil {
				t.Fatal(err)
			}
			_, err = OpenPrivate(dangling, flag)
			wantUnsafe(t, err, dangling, "a symbolic link")
			if _, err := os.Lstat(nowhere); !os.IsNotExist(err) {
				t.Errorf("a file was made where a dangling link points: %v", err)
			}

			fifo := filepath.Join(dir, "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			within(t, "OpenPrivate of a FIFO", func() {
				_, err = OpenPrivate(fifo, flag)
			})
			wantUnsafe(t, err, fifo, "a FIFO")

			sub := filepath.Join(dir, "sub")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			// A folder is no way to another file: an ordinary error.
			if _, err = OpenPrivate(sub, flag); !errors.Is(err, syscall.EISDIR) || IsUnsafe(err) {
				t.Errorf("OpenPrivate of a folder: %v, want EISDIR", err)
			}

			// A link to a device is a link; the device itself is a device.
			_, err = OpenExisting("/dev/null", flag)
			wantUnsafe(t, err, "/dev/null", "a character device")
		})
	}
}

// TestOpenPrivateMakesRegularFilesPrivate: what OpenPrivate creates or
// finds as a regular file is 0600, and reads and writes block as usual
// (O_NONBLOCK is cleared), with O_APPEND kept.
func TestOpenPrivateMakesRegularFilesPrivate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenPrivate(p, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	fl, err := fcntlFlags(f)
	if err != nil {
		t.Fatal(err)
	}
	if fl&syscall.O_NONBLOCK != 0 || fl&syscall.O_APPEND == 0 {
		t.Errorf("file status flags %#x: want O_APPEND without O_NONBLOCK", fl)
	}
	f.Close()
	if b, _ := os.ReadFile(p); string(b) != "a\nb\n" {
		t.Errorf("file holds %q, want the append after the content", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := TouchPrivate(filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "new")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("TouchPrivate made %v (%v), want a 0600 regular file", fi.Mode(), err)
	}
}

func fcntlFlags(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var fl int
	var ferr error
	if err := rc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		return 0, err
	}
	return fl, ferr
}

// TestLockRefusesAFIFOAndALink: a lock file that is a FIFO or a link is
// refused at once, neither locked nor waited on.
func TestLockRefusesAFIFOAndALink(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.lock")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	within(t, "OpenLock of a FIFO", func() { _, err = OpenLock(fifo) })
	wantUnsafe(t, err, fifo, "a FIFO")
	within(t, "OpenExistingLock of a FIFO", func() { _, err = OpenExistingLock(fifo) })
	wantUnsafe(t, err, fifo, "a FIFO")

	target, check := victim(t)
	link := filepath.Join(dir, "link.lock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err = OpenLock(link)
	wantUnsafe(t, err, link, "a symbolic link")
	check()

	// A real lock file locks: a second open of it cannot take it.
	p := filepath.Join(dir, "real.lock")
	a, err := OpenLock(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	b, err := OpenExistingLock(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ok, err := b.TryLock(); ok || err != nil {
		t.Fatalf("TryLock of a held lock: %v %v, want false", ok, err)
	}
	a.Close()
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock of a released lock: %v %v, want true", ok, err)
	}
}

// TestOwnDirRefusesALink: a link (to a folder) or a file where cq
// expects its own folder is refused, and nothing is made through it; a
// new folder is 0700 whatever the umask.
func TestOwnDirRefusesALink(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	link := filepath.Join(dir, "runs")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	err := OwnDir(link)
	wantUnsafe(t, err, link, "a symbolic link")
	if !strings.Contains(err.Error(), "cq's own folders must be real folders") {
		t.Errorf("message %q does not say a folder was expected", err)
	}
	if err := OwnDirExists(link); err == nil {
		t.Error("OwnDirExists accepted a link")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := OwnDir(file); !errors.Is(err, syscall.ENOTDIR) || IsUnsafe(err) {
		t.Errorf("OwnDir of a file: %v, want ENOTDIR", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the link's target got %d entries", len(ents))
	}

	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	p := filepath.Join(dir, "new")
	if err := OwnDir(p); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("OwnDir made %v (%v), want a 0700 folder", fi.Mode(), err)
	}
	if err := OwnDir(p); err != nil {
		t.Errorf("OwnDir of an existing folder: %v", err)
	}
}

// TestChmodFileRefusesALink: the mode is set on a regular file, never
// through a link.
func TestChmodFileRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target, check := victim(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	wantUnsafe(t, ChmodFile(link, 0o600), link, "a symbolic link")
	check()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ChmodFile(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}
