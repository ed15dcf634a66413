// Package fsutil creates cq's files and folders private to the user,
// whatever the umask: folders 0700, files 0600. It never follows a
// symbolic link nor opens a FIFO or device where cq expects a file or
// folder of its own: a link there would make cq write, truncate or chmod
// another file, and a FIFO would block it for good.
package fsutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// UnsafeError is a path where cq expects a regular file (or a real
// folder) of its own and finds a symbolic link, a FIFO, a device or a
// socket: something that would lead cq's writes elsewhere or block it.
// cq refuses to use it and leaves it as it is. A folder where a file is
// expected (or a file where a folder is) is an ordinary error instead
// (EISDIR, ENOTDIR): nothing can be written through it.
type UnsafeError struct {
	Path string
	// What it is instead, as "a symbolic link".
	What string
	// Dir: a folder was expected.
	Dir bool
}

func (e *UnsafeError) Error() string {
	rule := "cq's own files must be regular files"
	if e.Dir {
		rule = "cq's own folders must be real folders"
	}
	return fmt.Sprintf("refusing to use %s: it is %s (%s)", e.Path, e.What, rule)
}

// Link reports whether the path is a symbolic link.
func (e *UnsafeError) Link() bool { return e.What == linkKind }

// IsUnsafe reports whether err, or an error it wraps, is an *UnsafeError.
func IsUnsafe(err error) bool {
	var ue *UnsafeError
	return errors.As(err, &ue)
}

const linkKind = "a symbolic link"

// kind names what a file of mode m is, for an UnsafeError.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return linkKind
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// CheckFile returns an error unless fi, the Lstat of path, is a regular
// file: EISDIR for a folder, an *UnsafeError for anything else.
func CheckFile(path string, fi fs.FileInfo) error {
	return checkFile(path, fi.Mode())
}

func checkFile(path string, m fs.FileMode) error {
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return &fs.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	return &UnsafeError{Path: path, What: kind(m)}
}

// CheckAbsentOrFile returns an *UnsafeError when something other than a
// regular file is at path; nothing there is fine. For files another
// library opens by name (SQLite's database and its -wal and -shm).
func CheckAbsentOrFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	return CheckFile(path, fi)
}

// PrivateDir creates dir (and parents) if needed, 0700 whatever the
// umask. A folder that already exists is left as it is: the user chose
// it (--home ~ must not change the mode of a home folder, nor
// --home /srv/shared that of a shared one), and it may be reached through
// a symbolic link. Several processes may call it at once on the same
// path. For the home folder; cq's own folders inside it use OwnDir.
func PrivateDir(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("home %s is not a folder", dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create home folder: %w", err)
	}
	if st, err = os.Stat(dir); err != nil {
		return err
	}
	if st.Mode().Perm() != 0o700 {
		// Made just now (here or by a process racing this one) under a
		// umask that took bits away: give them back.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("cannot make home folder private: %w", err)
		}
	}
	return nil
}

// OwnDir makes sure path is a real folder, creating it 0700 (whatever
// the umask) if it is not there; its parent must exist. A symbolic link
// there is refused (*UnsafeError): writing through it would put cq's
// files, or delete them, elsewhere; so is anything else but a folder.
// Several processes may call it at once on the same path.
func OwnDir(path string) error {
	err := os.Mkdir(path, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, lerr := os.Lstat(path)
	if lerr != nil {
		return lerr
	}
	if err := checkDir(path, fi.Mode()); err != nil {
		return err
	}
	if err == nil && fi.Mode().Perm() != 0o700 {
		// Made just now under a umask that took bits away: give them
		// back, through a descriptor of the folder itself.
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: path, Err: err}
		}
		defer unix.Close(fd)
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return &fs.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return nil
}

// OwnDirExists checks that path is there and is a real folder, not a
// symbolic link (*UnsafeError) nor anything else.
func OwnDirExists(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return checkDir(path, fi.Mode())
}

// checkDir returns an error unless m, the Lstat mode of path, is a
// folder's: ENOTDIR for a regular file, an *UnsafeError for the rest.
func checkDir(path string, m fs.FileMode) error {
	switch {
	case m.IsDir():
		return nil
	case m.IsRegular():
		return &fs.PathError{Op: "mkdir", Path: path, Err: unix.ENOTDIR}
	}
	return &UnsafeError{Path: path, What: kind(m), Dir: true}
}

// OpenPrivate opens path with flag, creating it with mode 0600; a file of
// another mode is chmod'ed to exactly 0600 (through its descriptor) so
// the umask cannot loosen or tighten it. Anything but a regular file at
// path is refused and left untouched (not truncated, not chmod'ed, not
// written): a symbolic link, a FIFO, a device with an *UnsafeError, a
// folder with EISDIR.
func OpenPrivate(path string, flag int) (*os.File, error) {
	f, perm, err := open(path, flag|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if perm != 0o600 {
		_ = f.Chmod(0o600)
	}
	return f, nil
}

// OpenExisting opens the existing file path with flag as OpenPrivate
// does, without creating it or changing its mode: anything but a regular
// file is refused with an *UnsafeError.
func OpenExisting(path string, flag int) (*os.File, error) {
	f, _, err := open(path, flag&^os.O_CREATE, 0)
	return f, err
}

// ReadFile is os.ReadFile for one of cq's own files: anything but a
// regular file is refused (a FIFO would block the read for good).
func ReadFile(path string) ([]byte, error) {
	f, err := OpenExisting(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// open checks path with Lstat first, so that a FIFO or a device is never
// opened at all, then opens it without following a symbolic link and
// without blocking (a FIFO put there in between would block the open),
// and checks the open descriptor once more: what the Lstat saw may have
// been replaced in between. It returns the file's permission bits too.
func open(path string, flag int, perm uint32) (*os.File, os.FileMode, error) {
	if fi, err := os.Lstat(path); err == nil {
		if err := CheckFile(path, fi); err != nil {
			return nil, 0, err
		}
	}
	fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	for err == unix.EINTR {
		// The runtime's preemption signal can interrupt an open on a
		// slow file system; os.OpenFile retries likewise.
		fd, err = unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	}
	if err != nil {
		// O_NOFOLLOW fails with ELOOP on a link, a FIFO without a reader
		// with ENXIO, a folder opened to write with EISDIR: name what is
		// there rather than the errno.
		if fi, lerr := os.Lstat(path); lerr == nil {
			if uerr := CheckFile(path, fi); uerr != nil {
				return nil, 0, uerr
			}
		}
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := checkFile(path, modeOf(st.Mode)); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	// A regular file: blocking I/O, as os.OpenFile would give. F_SETFL
	// sets O_APPEND and O_NONBLOCK among others, so O_APPEND is kept.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flag&unix.O_APPEND); err != nil {
		unix.Close(fd)
		return nil, 0, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), os.FileMode(st.Mode & 0o777), nil
}

// modeOf is the fs.FileMode type bits of a stat mode.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFREG:
		return 0
	}
	return fs.ModeIrregular
}

// ChmodFile sets the mode of the regular file at path without following
// a symbolic link and without opening the file for reading or writing:
// closing such a descriptor would drop the POSIX locks this process holds
// on the file (SQLite's, on a database's -shm), and a descriptor opened
// with O_PATH does not. Anything but a regular file is refused.
func ChmodFile(path string, mode os.FileMode) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := checkFile(path, modeOf(st.Mode)); err != nil {
		return err
	}
	err = unix.Fchmodat(fd, "", uint32(mode.Perm()), unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		// A kernel before fchmodat2: the descriptor's /proc entry names
		// the very file it was opened on.
		err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(mode.Perm()))
	}
	if err != nil {
		return &fs.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// Lock is an flock (github.com/gofrs/flock) on one of cq's lock files,
// checked as OpenPrivate checks files: a symbolic link, a FIFO or a
// device there is refused rather than locked (or waited on for ever).
// The file is opened by path again when locked, never following a link
// and without blocking, and what was opened is checked once more.
// Close releases it.
type Lock struct {
	path string
	fl   *flock.Flock
}

// OpenLock makes sure the lock file at path exists (creating it 0600) and
// is a regular file; it is not yet locked.
func OpenLock(path string) (*Lock, error) {
	f, err := OpenPrivate(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f.Close()
	return newLock(path), nil
}

// OpenExistingLock is OpenLock for a lock file that must be there
// already; a missing file is fs.ErrNotExist.
func OpenExistingLock(path string) (*Lock, error) {
	f, err := OpenExisting(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f.Close()
	return newLock(path), nil
}

func newLock(path string) *Lock {
	return &Lock{path: path, fl: flock.New(path, flock.SetFlag(os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK))}
}

// held checks what the lock's file handle is, once locked: a file
// swapped for something else since OpenLock is let go and refused.
func (l *Lock) held(err error) error {
	if err != nil {
		return err
	}
	fi, err := l.fl.Stat()
	if err == nil {
		err = CheckFile(l.path, fi)
	}
	if err != nil {
		_ = l.fl.Unlock()
	}
	return err
}

// Lock takes the exclusive lock, waiting for it.
func (l *Lock) Lock() error { return l.held(l.fl.Lock()) }

// RLock takes a shared lock, waiting for it.
func (l *Lock) RLock() error { return l.held(l.fl.RLock()) }

// TryLock takes the exclusive lock if it is free now, and reports
// whether it did.
func (l *Lock) TryLock() (bool, error) {
	ok, err := l.fl.TryLock()
	if ok {
		err = l.held(nil)
	}
	return ok && err == nil, err
}

// TryLockContext tries the exclusive lock every retry until it has it or
// ctx ends (false, with ctx's error).
func (l *Lock) TryLockContext(ctx context.Context, retry time.Duration) (bool, error) {
	ok, err := l.fl.TryLockContext(ctx, retry)
	if ok {
		err = l.held(nil)
	}
	return ok && err == nil, err
}

// Close releases the lock and closes the file.
func (l *Lock) Close() error { return l.fl.Close() }
