package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cq-dev/cq/internal/store"

	"github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"
)

// ErrReadOnly means the store can be read but not written: the file, its
// folder or its file system does not let this process write. Test it with
// errors.Is; the error itself says where and what to check.
var ErrReadOnly = store.ErrReadOnly

// ErrFull means the device holding the store has no space left for a
// write; nothing of the failed transaction was stored.
var ErrFull = store.ErrFull

// FaultError is a store fault a user can act on (ErrReadOnly or ErrFull),
// said in words instead of SQLite's; it wraps the driver's error.
type FaultError struct {
	Kind error // ErrReadOnly or ErrFull
	Path string
	msg  string
	err  error
}

func (e *FaultError) Error() string        { return e.msg }
func (e *FaultError) Unwrap() error        { return e.err }
func (e *FaultError) Is(target error) bool { return target == e.Kind }

// Explain turns err, when it is a read-only or disk-full failure of the
// store at path, into a FaultError naming path; any other error comes
// back as it is. Checking the file and its folder decides what SQLite's
// codes leave open: it says "unable to open database file" both for a
// missing file and for a -wal it may not create beside a read-only one.
func Explain(path string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FaultError
	if errors.As(err, &fe) {
		return err
	}
	var se sqlite3.Error
	isSQLite := errors.As(err, &se)
	// Another error counts only when it is about the store's own files:
	// a full disk under stdout is no full store.
	var pe *fs.PathError
	ownFile := !isSQLite && errors.As(err, &pe) && strings.HasPrefix(pe.Path, path)
	switch {
	case isSQLite && (se.Code == sqlite3.ErrFull || se.SystemErrno == syscall.ENOSPC || se.SystemErrno == syscall.EDQUOT),
		ownFile && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)):
		return &FaultError{Kind: ErrFull, Path: path, err: err,
			msg: fmt.Sprintf("no space left on the device holding the store %s: free some space and try again", path)}
	case isSQLite && se.Code == sqlite3.ErrReadonly,
		isSQLite && (se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrIoErr || se.Code == sqlite3.ErrPerm) && !writable(path),
		ownFile && (errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)) && !writable(path):
		return readOnlyError(path, err)
	}
	return err
}

// readOnlyError says why path cannot be written, as far as this process
// can tell: a read-only file system, or permissions.
func readOnlyError(path string, err error) error {
	msg := fmt.Sprintf("the store %s is read-only: cannot write to it (check the permissions of the file and its folder)", path)
	if unix.Access(filepath.Dir(path), unix.W_OK) == unix.EROFS {
		msg = fmt.Sprintf("the store %s is read-only: cannot write to it (its file system is mounted read-only)", path)
	}
	return &FaultError{Kind: ErrReadOnly, Path: path, msg: msg, err: err}
}

// writable reports whether this process may write the store at path: the
// file (when it exists) and its folder, where SQLite creates the -wal and
// -shm files. A folder it cannot write is enough to refuse a store whose
// -wal is not there yet.
func writable(path string) bool {
	if err := unix.Access(path, unix.W_OK); err != nil && !errors.Is(err, unix.ENOENT) {
		return false
	}
	if unix.Access(filepath.Dir(path), unix.W_OK) != nil {
		_, err := os.Stat(path + "-wal")
		return err == nil && unix.Access(path+"-wal", unix.W_OK) == nil
	}
	return true
}

// errProbe ends CheckWritable's transaction, undoing its write.
var errProbe = errors.New("write probe")

// CheckWritable proves that this process can write the store, writing
// nothing: a write transaction that rewrites the schema version with its
// own value and rolls back. A long-lived writer (a worker) calls it
// before it takes anything on, so that a read-only store is a fatal
// error at its start rather than a claim retried for ever. It returns a
// FaultError (ErrReadOnly) for a store it cannot write.
func (d *DB) CheckWritable(ctx context.Context) error {
	err := d.Write(ctx, func(tx *Tx) error {
		v, err := d.userVersion(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
			return err
		}
		return errProbe
	})
	if errors.Is(err, errProbe) {
		return nil
	}
	return err
}
