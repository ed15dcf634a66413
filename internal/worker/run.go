package worker

import (
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// Why a worker killed a run's process group.
const (
	killTimeout = "timeout"
	killCancel  = "cancel"
	killRelease = "release"
	killLost    = "lost"
)

// run is one live run of this worker.
type run struct {
	c       *queue.Claimed
	cmd     *exec.Cmd
	pgid    int
	dir     string
	started time.Time
	endedAt time.Time // when wait returned (loop goroutine after exited)
	// pidfd is the process's pidfd (-1 where the kernel has none); ws
	// and waitErr are how it ended (waitErr: it could not be waited for).
	pidfd   int
	pid     int
	reaped  atomic.Bool
	ws      syscall.WaitStatus
	waitErr error

	mu sync.Mutex
	// timer is the run's time limit; timerGen tells a firing of an
	// older one (see armTimeout).
	timer     *time.Timer
	timerGen  int
	killWhy   string
	lost      bool
	overdue   bool
	lastRenew time.Time
	stdout    *os.File
	stderr    *os.File
	// outputLost says why the run's output goes to /dev/null ("" if it
	// goes to its log files).
	outputLost string
	// giveBack says the spawn failed for the worker's own want of
	// resources: the run is released, not failed.
	giveBack bool
}

func (r *run) renewed(t time.Time) {
	r.mu.Lock()
	r.lastRenew, r.overdue = t, false
	r.mu.Unlock()
}

func (r *run) renewedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRenew
}

// markLost records that the lease is gone; it reports whether this call
// did it.
func (r *run) markLost() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost {
		return false
	}
	r.lost = true
	return true
}

// warnOverdue reports whether an overdue renewal should be logged: once
// per overdue spell.
func (r *run) warnOverdue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overdue {
		return false
	}
	r.overdue = true
	return true
}

func (r *run) isLost() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

func (r *run) why() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killWhy
}

// kill stops the run's process group: SIGTERM now, SIGKILL after grace (at
// once for a lost lease). The first reason wins; it reports whether this
// call started the kill.
func (r *run) kill(why string, grace time.Duration) bool {
	if why != killLost && r.exited() {
		// It ended on its own before the kill: its own outcome stands.
		return false
	}
	r.mu.Lock()
	first := r.killWhy == ""
	if first || why == killLost {
		r.killWhy = why
	}
	r.mu.Unlock()
	if !first && why != killLost {
		return false
	}
	if grace <= 0 {
		signalGroup(r.pgid, syscall.SIGKILL)
		return true
	}
	signalGroup(r.pgid, syscall.SIGTERM)
	pgid := r.pgid
	time.AfterFunc(grace, func() { signalGroup(pgid, syscall.SIGKILL) })
	return true
}

// setTimeout replaces the run's time limit (0: none), counted from its
// start (loop goroutine, once the run is adopted).
func (r *run) setTimeout(d, grace time.Duration, asked func() time.Duration) {
	r.c.Timeout = d
	r.armTimeout(d, grace, asked)
}

// armTimeout arms the run's time limit d, counted from its start, less
// the time its questions waited for an answer (asked, read when the limit
// seems reached: docs/interactive.md); 0 disarms it.
func (r *run) armTimeout(d, grace time.Duration, asked func() time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.timerGen++
	if d <= 0 {
		return
	}
	gen := r.timerGen
	var fire func()
	fire = func() {
		left := d - time.Since(r.started) + asked()
		r.mu.Lock()
		if r.timerGen != gen {
			r.mu.Unlock()
			return
		}
		if left > 0 {
			r.timer = time.AfterFunc(left, fire)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.kill(killTimeout, grace)
	}
	r.timer = time.AfterFunc(max(d-time.Since(r.started), 0), fire)
}

// stopTimeout disarms the run's time limit.
func (r *run) stopTimeout() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timerGen++
}
