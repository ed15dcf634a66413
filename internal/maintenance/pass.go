// Package maintenance is the pass that cron runs through cq heartbeat and
// every worker runs in-process on a timer: it drains the spool, reaps lost
// runs, promotes due tasks, warns, and writes summaries; cq cleanup and
// cq queue clear use its batched deletes. Every step is a compare-and-set
// in the store, so passes may overlap safely.
package maintenance

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/home"
	"github.com/cq-dev/cq/internal/procs"
	"github.com/cq-dev/cq/internal/queue"
)

// Result counts what one pass did.
type Result struct {
	Drained      int `json:"drained"`
	Reaped       int `json:"reaped"`
	Killed       int `json:"killed"`
	StartTimeout int `json:"start_timeouts"`
	Promoted     int `json:"promoted"`
	Cancelled    int `json:"cancelled"`
	Warned       int `json:"warned"`
	Progress     int `json:"progress_events"`
	Fired        int `json:"schedule_tasks"`
	SlotsSkipped int `json:"schedule_slots_skipped"`
	// NextSlot is the schedules' next slot (zero: none): when the next
	// pass, or a worker's look at the schedules, is due.
	NextSlot  time.Time `json:"-"`
	Summaries int       `json:"summaries_written"`
	Health    string    `json:"health"`
}

// Options tune a pass.
type Options struct {
	// Home is the home folder whose spool is drained.
	Home string
	// Host is this machine's name: lost runs recorded on it get their
	// process group killed.
	Host string
	// AllWarnings makes the pass warn about every task waiting too long,
	// in steps of queue.WarnBatch per queue with a pause after each (cq
	// heartbeat). Without it a pass warns about one step's worth: a
	// worker's pass runs on its claim loop and must stay short.
	AllWarnings bool
}

// warnSteps bounds the steps of one pass's wait warnings (a million
// tasks per queue): the next pass goes on.
const warnSteps = 1000

// deadWorkerKept is how long the row of a worker whose lease passed is
// kept before a pass deletes it.
const deadWorkerKept = 24 * time.Hour

// Pass runs one maintenance pass (docs/operations.md, Heartbeat): it drains the spool,
// reaps runs whose lease expired (killing their process groups left on
// this host), times out runs not started within their queue's start
// timeout, promotes blocked tasks that nothing blocks any more, cancels
// dependents of failed or cancelled tasks, makes the tasks of the
// schedules' slots due, warns once about tasks waiting
// too long, and records last_heartbeat, queue_length and health in
// system_state.
func Pass(ctx context.Context, st *queue.Store, opt Options) (Result, error) {
	var r Result
	var err, spoolErr error
	if opt.Home != "" {
		if r.Drained, err = st.DrainSpool(ctx, opt.Home); err != nil {
			if !fsutil.IsUnsafe(err) {
				return r, err
			}
			// A spool file that is not cq's own (a symbolic link, a
			// FIFO) is refused until someone removes it: the rest of the
			// pass must not wait for that. It is reported at the end.
			spoolErr = err
		}
	}
	// A lost run's processes on this host are killed inside the
	// transaction that ends the run, before its commit frees the task and
	// its key's lane: the old process is gone before anyone else may take
	// the task (a transaction that fails kills them all the same; their
	// lease had expired). The group first (guarded against pid reuse),
	// then anything of the run that left its group.
	killed := map[string]bool{}
	stop := func(rp queue.Reaped) {
		if rp.Host == "" || rp.Host != opt.Host || killed[rp.RunID] {
			return
		}
		// Both: a group still alive does not mean nothing left it.
		group := procs.KillGroup(rp.Pgid, rp.RunID, rp.Claimed, rp.Started)
		if n := procs.KillRuns([]string{rp.RunID}); group || n > 0 {
			killed[rp.RunID] = true
		}
	}
	reaped, err := st.ReapExpiredThen(ctx, stop)
	if err != nil {
		return r, err
	}
	r.Reaped = len(reaped)
	for _, rp := range reaped {
		if opt.Home != "" {
			WriteSummary(ctx, st, opt.Home, rp.TaskID, rp.RunID)
		}
	}
	// Likewise for a run the start timeout ends: its worker may have
	// started the process and stalled before it recorded the start.
	timedOut, err := st.TimeoutQueuedRunsThen(ctx, stop)
	if err != nil {
		return r, err
	}
	r.StartTimeout = len(timedOut)
	for _, rp := range timedOut {
		if opt.Home != "" {
			WriteSummary(ctx, st, opt.Home, rp.TaskID, rp.RunID)
		}
	}
	// A worker of this host that died with its supervisor (SIGKILL of
	// both, an OOM kill) leaves its runs' grandchildren running until
	// their leases expire: kill them as soon as the worker's lock says it
	// is gone (home.WorkerGone). The runs themselves are left to the
	// reaper, which ends them once their leases expire (docs/semantics.md, Leases).
	locks := home.StoreFiles(opt.Home, st.Backend().Addr())
	if err := killGoneWorkersRuns(ctx, st, opt.Host, locks, stop); err != nil {
		return r, err
	}
	home.SweepWorkerLocks(locks)
	// A worker gone without a word is no longer listed once its lease
	// passed; its row is kept a while for someone reading the store.
	if _, err := st.SweepWorkers(ctx, deadWorkerKept); err != nil {
		return r, err
	}
	r.Killed = len(killed)
	r.Summaries = WriteMissingSummaries(ctx, st, opt.Home)
	if r.Promoted, err = st.PromoteDue(ctx); err != nil {
		return r, err
	}
	n, err := st.PromoteReady(ctx)
	if err != nil {
		return r, err
	}
	r.Promoted += n
	if r.Cancelled, err = st.CancelOrphans(ctx); err != nil {
		return r, err
	}
	// The schedules' slots due (docs/schedules.md); one schedule's
	// failure is reported once the rest of the pass ran.
	fired, fireErr := st.FireSchedules(ctx)
	r.Fired, r.SlotsSkipped, r.NextSlot = fired.Fired, fired.Skipped, fired.Next
	for step := 0; ; step++ {
		began := time.Now()
		n, more, err := st.WarnWaitingStep(ctx, queue.WarnBatch)
		r.Warned += n
		if err != nil {
			return r, err
		}
		if !more || !opt.AllWarnings || step+1 >= warnSteps {
			break
		}
		if err := pause(ctx, time.Since(began)); err != nil {
			return r, err
		}
	}
	// Rate-limited progress reports left without their event get it.
	if r.Progress, err = st.FlushProgress(ctx, 1000); err != nil {
		return r, err
	}
	if err := st.SetSystemState(ctx, map[string]string{"last_heartbeat": queue.FormatTime(st.Now())}); err != nil {
		return r, err
	}
	h, err := st.Health(ctx, queue.DefaultThresholds())
	if err != nil {
		return r, err
	}
	r.Health = h.Status
	if err := st.SetSystemState(ctx, map[string]string{"queue_length": strconv.Itoa(h.Backlog), "health": h.Status}); err != nil {
		return r, err
	}
	if fireErr != nil {
		return r, fireErr
	}
	return r, spoolErr
}

// killGoneWorkersRuns calls stop (the reaper's kill) for each live run of
// host whose worker is gone (its lock files named after locks).
func killGoneWorkersRuns(ctx context.Context, st *queue.Store, host, locks string, stop func(queue.Reaped)) error {
	if host == "" {
		return nil
	}
	live, err := st.LiveRunsOn(ctx, host)
	if err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, lr := range live {
		g, seen := gone[lr.Worker]
		if !seen {
			g = workerGone(locks, lr)
			gone[lr.Worker] = g
		}
		if g {
			stop(lr.Reaped)
		}
	}
	return nil
}

// workerGone reports whether the worker holding lr is gone: its process
// (the pid of its id, host:pid) is not the one that claimed lr, and its
// lock is free (home.WorkerGone). Both must say so: the pid alone cannot
// tell a worker of another pid namespace that shares the hostname, and
// the lock alone trusts the file system's flock.
func workerGone(locks string, lr queue.LiveRun) bool {
	i := strings.LastIndexByte(lr.Worker, ':')
	if i < 0 {
		return false
	}
	pid, err := strconv.Atoi(lr.Worker[i+1:])
	if err != nil || procs.Lives(pid, lr.Claimed) {
		return false
	}
	return home.WorkerGone(locks, lr.Worker)
}
