package worker

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"github.com/cq-dev/cq/internal/procs"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// becomeSubreaper makes the worker the parent of every orphan among its
// runs' descendants: a process that left its run's process group (setsid,
// a daemon) is reparented to the worker when its parent exits, instead of
// to init, so that sweepOrphans finds it. It reports whether that worked.
func becomeSubreaper() bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	return errno == 0
}

// noteKid records pid as the process of run runID (under forkMu, shared,
// held across the fork, so that a sweep never takes a run's own process
// for an orphan); forgetKid drops it once it is reaped.
func (w *Worker) noteKid(pid int, runID string) {
	w.kidsMu.Lock()
	w.kids[pid] = runID
	w.kidsMu.Unlock()
}

func (w *Worker) forgetKid(pid int) {
	w.kidsMu.Lock()
	delete(w.kids, pid)
	w.kidsMu.Unlock()
}

// sweepOrphans kills what ended runs left behind: every child of the
// worker (orphans are reparented to its main thread) that is not a run's
// own process nor the supervisor and carries the CQ_RUN_ID of no live run
// of this worker, with its process group; and it reaps those that have
// exited. A run's descendants that it left running would otherwise
// outlive it and overlap the task's next run, or the next task of its key.
//
// After a batch of ends it does not wait for spawns in progress (wait
// false): the loop goes on, and the next sweep, at the latest the one
// every second (wait true), finds what this one skipped.
func (w *Worker) sweepOrphans(wait bool) {
	if !w.subreaper {
		return
	}
	if wait {
		w.forkMu.Lock()
	} else if !w.forkMu.TryLock() {
		return
	}
	defer w.forkMu.Unlock()
	b, err := os.ReadFile(w.childrenFile)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return
	}
	sup := w.sup.pid()
	w.kidsMu.Lock()
	defer w.kidsMu.Unlock()
	var live map[string]bool
	for _, f := range bytes.Fields(b) {
		pid, err := strconv.Atoi(string(f))
		if err != nil || pid <= 1 || pid == sup {
			continue
		}
		if _, ok := w.kids[pid]; ok {
			continue
		}
		if id := procs.RunOf(pid); id != "" && id != w.ownRunID {
			if live == nil {
				live = make(map[string]bool, len(w.kids))
				for _, r := range w.kids {
					live[r] = true
				}
			}
			if !live[id] {
				w.log.Info("run.orphan_killed", "run", id, "pid", pid)
				procs.Kill(pid)
			}
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}
