package worker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/procs"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store"
)

// ending is a run's end waiting to be recorded.
type ending struct {
	r *run
	f queue.Finish
}

// finish records the outcome of a run whose process ended, together with
// any others that ended meanwhile, and (unless the worker is stopping)
// claims as many new tasks in the same transaction, then starts them.
func (w *Worker) finish(ctx context.Context, first *run) {
	batch := []*run{first}
more:
	for len(batch) < cap(w.exited) {
		select {
		case r := <-w.exited:
			batch = append(batch, r)
		default:
			break more
		}
	}
	// A run's spawn sent it on spawnedC before its exit was sent: every
	// run in the batch is adopted by now or waits there. Adopted now, its
	// start goes into the transaction that records its end, before it.
	w.adopt(ctx, nil)
	var ends []ending
	for _, r := range batch {
		if e, ok := w.ended(r); ok {
			ends = append(ends, e)
		}
	}
	claimN := 0
	if !w.stopping && ctx.Err() == nil {
		claimN = w.room()
	}
	if len(ends) == 0 && claimN == 0 && len(w.pending) == 0 {
		return
	}
	w.launch(w.record(ctx, ends, claimN))
	// The ended runs' leftovers outside their groups (setsid, daemons)
	// were reparented here when the runs' processes exited.
	w.sweepOrphans(false)
}

// ended cleans up after a run's process and works out its outcome; false
// means nothing is to be written (the lease is lost).
func (w *Worker) ended(r *run) (ending, bool) {
	r.stopTimeout()
	// Whatever the leader left behind in its group goes with it; a run
	// that was killed also loses what escaped its group (setsid).
	signalGroup(r.pgid, syscall.SIGKILL)
	if r.why() != "" {
		procs.KillRuns([]string{r.c.RunID})
	}
	w.sup.del(r.pgid, r.c.RunID)
	// The task writes its output itself, so a write that failed for lack
	// of space is seen here, after the fact, by the file system being full.
	outputErr := r.outputLost
	var fs syscall.Statfs_t
	if outputErr == "" && syscall.Fstatfs(int(r.stdout.Fd()), &fs) == nil && fs.Bavail == 0 {
		outputErr = "output may be incomplete: no space left on the device holding the run's logs"
	}
	r.stdout.Close()
	r.stderr.Close()
	w.mu.Lock()
	delete(w.runs, r.c.RunID)
	w.mu.Unlock()
	// The lease is gone, or as good as gone (a worker frozen past 2/3 of
	// its TTL may resume before its watchdog notices): someone else may own
	// the task now, and this worker writes nothing more for it.
	if time.Since(r.renewedAt()) >= 2*w.opt.Lease/3 && r.markLost() {
		w.log.Error("run.lost", "task", r.c.TaskID, "run", r.c.RunID, "why", "lease not renewed for 2/3 of its TTL")
	}
	if r.isLost() {
		return ending{}, false
	}
	e := ending{r: r, f: queue.Finish{RunID: r.c.RunID, Token: r.c.Token}}
	o := &e.f.Outcome
	o.State, o.At = queue.RunSucceeded, r.endedAt
	switch ws := r.ws; {
	case r.waitErr != nil:
		o.State, o.Class, o.Error = queue.RunFailed, queue.ClassTransient, r.waitErr.Error()
	case ws.Exited() && ws.ExitStatus() == 0:
		o.ExitCode = intp(0)
	default:
		if ws.Signaled() {
			o.Signal = signalName(ws.Signal())
		} else {
			o.ExitCode = intp(ws.ExitStatus())
		}
		o.State = queue.RunFailed
		if o.ExitCode != nil && *o.ExitCode == queue.ExitTempFail {
			o.Class = queue.ClassTransient
		}
	}
	switch r.why() {
	case killTimeout:
		o.State, o.Class = queue.RunTimeout, queue.ClassTimeout
		o.Error = "timed out after " + r.c.Timeout.String()
	case killCancel:
		o.State, o.Class = queue.RunCancelled, ""
	case killRelease:
		e.f.Release = true
	}
	if outputErr != "" && o.Error == "" {
		o.Error = outputErr
	}
	if w.opt.KeepOutput {
		e.f.Output = w.outputTail(r)
	}
	return e, true
}

// outputTail is the end of r's output as the store keeps it (at most
// outputTailMax of each stream), read back from its files.
func (w *Worker) outputTail(r *run) *store.RunOutput {
	o := &store.RunOutput{RunID: r.c.RunID, Host: w.host}
	o.Stdout, o.StdoutSize = fileTail(filepath.Join(r.dir, "stdout.log"), outputTailMax)
	o.Stderr, o.StderrSize = fileTail(filepath.Join(r.dir, "stderr.log"), outputTailMax)
	return o
}

// outputTailMax is how much of each stream's end the store keeps.
const outputTailMax = 64 << 10

// fileTail reads the last max bytes of the file at path, and its size;
// nothing for a file it cannot read (the run's error says why).
func fileTail(path string, limit int64) ([]byte, int64) {
	f, err := fsutil.OpenExisting(path, os.O_RDONLY)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0
	}
	size := fi.Size()
	off := max(size-limit, 0)
	b := make([]byte, size-off)
	n, _ := f.ReadAt(b, off)
	return b[:n], size
}

func intp(n int) *int { return &n }

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
