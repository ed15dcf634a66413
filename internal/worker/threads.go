package worker

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reserveThreads makes n OS threads now and leaves them idle in the Go
// runtime's pool, which keeps idle threads for the life of the process.
// A task that exhausts the user's process limit (a fork bomb under
// ulimit -u) also leaves no room for new threads, and the runtime aborts
// the whole process when it cannot make one it needs; with threads made
// beforehand it takes an idle one instead. Each goroutine below locks its
// own thread and waits until all are locked, so n distinct threads exist
// at once before they are handed back.
func reserveThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			// Unlocked before the goroutine ends: a goroutine that ends
			// locked takes its thread down with it.
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

// maxSpawning bounds the spawns in flight at once. Each one may hold a
// thread while it forks and waits for the exec, so the bound is what keeps
// the threads a worker needs within those reserveThreads made: a worker
// that needed a new thread while a task held every process the user may
// have would abort.
const maxSpawning = 8

// spareThreads is how many threads a worker reserves beyond GOMAXPROCS:
// the spawns in flight, SQLite calls on the loop, the lease keeper and
// the checkpointer, and the runtime's own.
const spareThreads = maxSpawning + 16

// isResourceErr says whether a spawn failed for the worker's own want of
// resources (open files, processes, memory) rather than for its task:
// such a run is given back, not failed. EBADF is the child's dup of a
// descriptor onto a number past the open-files limit, the same want.
func isResourceErr(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EBADF)
}

// isStartErr says whether a spawn failed for good, for a reason that
// lies in the task: its command is missing or cannot be executed, or its
// working folder is missing or not a folder. Retrying cannot help.
func isStartErr(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOENT, syscall.EACCES, syscall.EPERM, syscall.ENOTDIR,
		syscall.ENOEXEC, syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.E2BIG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// cwdProblem says what is wrong with a run's working folder ("" if it
// looks usable, or none was given), naming it.
func cwdProblem(dir string) string {
	if dir == "" {
		return ""
	}
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return dir + ": " + errText(err)
	case !st.IsDir():
		return dir + ": not a folder"
	case unix.Access(dir, unix.X_OK) != nil:
		return dir + ": permission denied"
	}
	return ""
}

// startErrText names the command that could not be started and why.
func startErrText(path string, err error) string {
	switch {
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return path + ": permission denied (not executable, or a folder on its path is not searchable)"
	case errors.Is(err, syscall.ENOEXEC):
		return path + ": not an executable format (a script needs a #! line)"
	case errors.Is(err, syscall.ENOENT):
		return path + ": no such file (or its #! interpreter is missing)"
	}
	return path + ": " + errText(err)
}

// errText is err's innermost message ("no such file or directory"),
// without the operation and path a PathError repeats.
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
