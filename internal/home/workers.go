// Package home keeps cq's host-local files: what they say concerns the
// processes of this host, not the stored state, so they live in files
// beside the store (named after its path) and no database backend knows
// of them. For now, the lock files by which a worker says it lives.
package home

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cq-dev/cq/internal/fsutil"
)

// A worker holds an exclusive flock on a file of its own in the store's
// -workers folder for as long as it lives; the kernel drops the lock when
// the process dies, however it dies (SIGKILL, an OOM kill). So a
// maintenance pass can tell that a worker of this host is gone before its
// runs' leases expire, and kill what its runs left behind: when a worker
// and its supervisor die at the same instant, nothing else would until
// then. The lock is on the file, not on a pid: a worker of another pid
// namespace that shares the store and the hostname is never taken for
// gone while it lives.

// StoreFiles is the path the host-local files of the store at addr are
// named after: the database file itself for a store that is a file, else
// (a server's URL) a name in the home folder homeDir made from the URL,
// or "" (no such files) without a home folder.
func StoreFiles(homeDir, addr string) string {
	if filepath.IsAbs(addr) {
		return addr
	}
	if homeDir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(addr))
	return filepath.Join(homeDir, "store-"+hex.EncodeToString(sum[:8]))
}

// workersDir is the folder of the worker lock files of the store at
// dbPath.
func workersDir(dbPath string) string { return dbPath + "-workers" }

// workerLockName is the start of worker id's lock file names: the
// pid namespace follows it (see HoldWorker).
func workerLockName(id string) string { return strings.ReplaceAll(id, "/", "_") + "@" }

// HoldWorker marks worker id alive until release (which removes its lock
// file in the -workers folder of the store at dbPath): see WorkerGone. The file's name holds this process's pid
// namespace as well, so that two workers of one id (one hostname, one pid
// number, two containers) each hold a file of their own.
func HoldWorker(dbPath, id string) (release func(), err error) {
	if dbPath == "" {
		return nil, errors.New("no place for worker lock files")
	}
	if err := fsutil.OwnDir(workersDir(dbPath)); err != nil {
		return nil, err
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	ns = strings.Trim(strings.TrimPrefix(ns, "pid:"), "[]")
	p := filepath.Join(workersDir(dbPath), workerLockName(id)+ns+".lock")
	for range 10 {
		f, err := fsutil.OpenPrivate(p, os.O_RDWR)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			return nil, err
		}
		// WorkerGone removes a dead worker's file under its lock: if it
		// did so between this open and this lock, the lock is on a file
		// no longer there, and the next open makes a new one.
		if samePath(f, p) {
			return func() {
				_ = os.Remove(p)
				_ = f.Close()
			}, nil
		}
		f.Close()
	}
	return nil, errors.New("worker lock file keeps being replaced")
}

// WorkerGone reports whether worker id, which held a lock file on this
// store, has died: it has such files and an exclusive flock on each can
// be had at once. It then removes them (under their locks), so each death
// is reported once. A worker with no file (one that could not make it, or
// that keeps its lock files by another store path) is never reported gone.
func WorkerGone(dbPath, id string) bool {
	if dbPath == "" {
		return false
	}
	dir := workersDir(dbPath)
	ents, err := readOwnDir(dir)
	if err != nil {
		return false
	}
	prefix := workerLockName(id)
	var locked []*os.File
	defer func() {
		for _, f := range locked {
			f.Close()
		}
	}()
	var paths []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := fsutil.OpenExisting(p, os.O_RDWR)
		if err != nil {
			return false
		}
		locked = append(locked, f)
		// Held: that worker lives. Replaced meanwhile: a new worker of
		// the same id (a recycled pid), and which one the runs are is
		// unknown. Either way, not gone.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil || !samePath(f, p) {
			return false
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return false
	}
	for _, p := range paths {
		_ = os.Remove(p)
	}
	return true
}

// readOwnDir lists dir, unless it is a symbolic link (or not a folder):
// the lock files found through a link would be another folder's, and
// they are removed.
func readOwnDir(dir string) ([]os.DirEntry, error) {
	if err := fsutil.OwnDirExists(dir); err != nil {
		return nil, err
	}
	return os.ReadDir(dir)
}

// samePath reports whether f is still the file at path.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// SweepWorkerLocks removes the lock files of workers that died (their
// flock is free), whatever their host: those of this host's dead workers
// with live runs are for WorkerGone first, so a pass calls this after it.
// A worker that made its file and has not locked it yet finds it gone
// once it has, and makes another (HoldWorker).
func SweepWorkerLocks(dbPath string) int {
	if dbPath == "" {
		return 0
	}
	dir := workersDir(dbPath)
	ents, err := readOwnDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := fsutil.OpenExisting(p, os.O_RDWR)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil && samePath(f, p) && os.Remove(p) == nil {
			n++
		}
		f.Close()
	}
	return n
}
