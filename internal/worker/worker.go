// Package worker runs tasks: claim → spawn (own process group) → renew the
// lease → record the outcome, with timeouts, cancels, graceful stop, and
// a supervisor that leaves no process behind if the worker dies.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/home"
	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/spool"
	"github.com/cq-dev/cq/internal/store"
	"github.com/fsnotify/fsnotify"
)

// Options configure a worker.
type Options struct {
	Queues      []string
	Concurrency int
	// Once: keep claiming until nothing is runnable and no run is left,
	// then return.
	Once     bool
	IdleExit time.Duration
	Lease    time.Duration
	Grace    time.Duration
	Handlers string
	Home     string
	// DBPath is the database file; its folder is watched for writes so an
	// idle worker wakes at once when work arrives.
	DBPath string
	// DB is the store as its runs' cq commands (cq ask, cq progress…)
	// must name it in CQ_DB: "" when it is their home's own.
	DB string
	// KeepOutput keeps the end of each run's output in the store as the
	// run ends, for cq logs on other hosts (a store hosts share).
	KeepOutput bool
	// Executable is the cq binary that runs the supervisor; empty disables
	// it (tests of the loop alone).
	Executable string
	Log        *slog.Logger

	// PollEvery is the fallback claim poll when no write is noticed.
	PollEvery time.Duration
	// CancelPoll is how often a worker with live runs looks for cancels.
	CancelPoll time.Duration
	// HeartbeatEvery is how often the in-process maintenance pass runs.
	HeartbeatEvery time.Duration
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Lease <= 0 {
		o.Lease = 90 * time.Second
	}
	if o.Grace < 0 {
		o.Grace = 0
	}
	if o.PollEvery <= 0 {
		o.PollEvery = time.Second
	}
	if o.CancelPoll <= 0 {
		o.CancelPoll = 250 * time.Millisecond
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
}

// Worker runs tasks from one store.
type Worker struct {
	st   *queue.Store
	opt  Options
	id   string
	host string
	log  *slog.Logger
	sup  *supervisor

	mu   sync.Mutex
	runs map[string]*run // live runs by run id

	exited chan *run
	wake   chan struct{}

	// environ is the worker's environment, the base of every run's.
	environ []string
	// summaries are written by a goroutine of their own, off the loop's
	// path from one run's end to the next run's start.
	summaries   chan queue.Run
	summaryDone chan struct{}
	// stopping is set (on the loop's goroutine) once a graceful stop began.
	stopping bool
	// spoolRefused is the last refusal of a spool file not cq's own (a
	// symbolic link, a FIFO) that was logged, so that it is logged once
	// and not at every claim (loop goroutine only).
	spoolRefused string
	// watcher and watched are the folder watch (see watch); the loop turns
	// it off while every slot is busy.
	watcher *fsnotify.Watcher
	watched []string
	watchOn bool
	// pending are runs launched whose start is not recorded yet (loop
	// goroutine only); startTimer records them within startDelay.
	pending    []*run
	startTimer *time.Timer
	startArmed bool
	// dueTimer fires when the next backoff or schedule falls due, when
	// that is sooner than the next poll (loop goroutine only).
	dueTimer *time.Timer
	dueArmed bool
	// schedTimer fires when the schedules' next slot is due (or
	// scheduleCheck passed); set by the first maintenance pass.
	schedTimer *time.Timer
	// inflight counts spawns whose result the loop has not adopted yet
	// (loop goroutine only); spawnedC carries those results (see launch).
	inflight int
	spawnedC chan spawned
	// limit is how many runs the worker holds at most for now: lowered
	// to what it holds when a spawn fails for want of resources, raised
	// by one with each spawn that succeeds, up to Concurrency; no claim
	// is made before spawnAfter (loop goroutine only).
	limit        int
	spawnAfter   time.Time
	spawnBackoff time.Duration
	// spawning bounds the spawns in flight (see maxSpawning).
	spawning chan struct{}
	// killAll, once a graceful stop's grace is over, is why every run is
	// killed, including those adopted after that.
	killAll string
	// progressAt is when the loop last wrote held-back progress events
	// (see flushProgress).
	progressAt time.Time
	// null is the shared stdin of runs (see devNull).
	nullOnce sync.Once
	null     *os.File
	// paths caches PATH lookups of command names (see command).
	pathMu sync.Mutex
	paths  map[string]pathEntry
	// kids are the runs' own processes not reaped yet, pid → run id (see
	// sweepOrphans); subreaper says orphans come to this process,
	// childrenFile lists its main thread's children, and ownRunID is the
	// worker's own CQ_RUN_ID when it runs as a task itself.
	kidsMu sync.Mutex
	kids   map[int]string
	// forkMu is held (shared) by every spawn across its fork and exec, so
	// that a sweep (which takes it alone) never finds a run's process
	// started but not yet in kids.
	forkMu       sync.RWMutex
	subreaper    bool
	childrenFile string
	ownRunID     string
}

// New makes a worker over st.
func New(st *queue.Store, opt Options) *Worker {
	opt.defaults()
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return &Worker{
		st: st, opt: opt, host: host,
		id:     fmt.Sprintf("%s:%d", host, os.Getpid()),
		log:    opt.Log,
		runs:   map[string]*run{},
		exited: make(chan *run, 256),
		// Never full: a spawn is counted in inflight, at most
		// Concurrency of them, until its result is received.
		spawnedC: make(chan spawned, opt.Concurrency),
		wake:     make(chan struct{}, 1),
		limit:    opt.Concurrency,
		spawning: make(chan struct{}, maxSpawning),
		environ:  runEnviron(os.Environ()),
		paths:    map[string]pathEntry{},
		kids:     map[int]string{},
		// Orphans are reparented to the main thread (the thread group
		// leader, whose tid is the pid).
		childrenFile: fmt.Sprintf("/proc/self/task/%d/children", os.Getpid()),
		ownRunID:     os.Getenv("CQ_RUN_ID"),
		startTimer:   stoppedTimer(),
		dueTimer:     stoppedTimer(),
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// ID names this worker in runs and logs.
func (w *Worker) ID() string { return w.id }

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run works until ctx ends (a graceful stop: stop claiming, wait up to
// Grace for the runs, then kill and release the rest), or until --once or
// --idle-exit says it is done. An error is fatal (exit 1).
func (w *Worker) Run(ctx context.Context) error {
	// A store it can read but not write is fatal at the start, before
	// anything is claimed, spawned or created in the home: retrying would
	// wait for ever on what only the user can fix. Any other failure of
	// the probe (a busy store, a full disk) is what the loop's backoff is
	// for.
	if err := w.st.Backend().CheckWritable(ctx); errors.Is(err, store.ErrReadOnly) {
		w.log.Error("store.error", "op", "start", "error", err.Error())
		return err
	} else if err != nil && ctx.Err() == nil {
		w.log.Warn("store.error", "op", "start", "error", err.Error())
	}
	if w.opt.Executable != "" {
		sup, err := startSupervisor(w.opt.Executable, func(msg string, err error) { w.log.Error(msg, "error", err.Error()) })
		if err != nil {
			return err
		}
		w.sup = sup
		defer w.sup.close()
	}
	// Before anything is spawned: see reserveThreads.
	reserveThreads(runtime.GOMAXPROCS(0) + spareThreads)
	w.subreaper = becomeSubreaper()
	// The backend's upkeep by a long-lived writer (SQLite: the store is
	// held, so short commands leave the WAL to this worker, whose
	// checkpoints run off the loop: an inline one held a commit, and so
	// every slot, for its copy and two fsyncs).
	stopAttend, err := w.st.Backend().Attend(ctx)
	defer stopAttend()
	if err != nil {
		w.log.Warn("store.attend_failed", "error", err.Error())
	}
	// Says this worker lives: a maintenance pass kills what the runs of a
	// worker gone with its supervisor left behind (home.WorkerGone).
	if release, err := home.HoldWorker(home.StoreFiles(w.opt.Home, w.st.Backend().Addr()), w.id); err == nil {
		defer release()
	} else {
		w.log.Warn("worker.lock_failed", "error", err.Error())
	}
	// Listed by cq workers from now on; a clean stop, whatever its cause,
	// takes the row away once the runs are released (the keeper, which
	// refreshes it, has stopped by then: see the deferred calls below).
	if err := w.st.WorkerSeen(ctx, w.workerParams()); err != nil && ctx.Err() == nil {
		w.log.Warn("store.error", "op", "worker.seen", "error", err.Error())
	}
	defer func() {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.st.WorkerLeft(lctx, w.id); err != nil {
			w.log.Warn("store.error", "op", "worker.left", "error", err.Error())
		}
	}()
	w.summaries, w.summaryDone = make(chan queue.Run, 1024), make(chan struct{})
	go func() {
		defer close(w.summaryDone)
		for r := range w.summaries {
			maintenance.SaveSummary(w.opt.Home, r)
		}
	}()
	// Every summary is on disk before Run returns.
	defer func() { close(w.summaries); <-w.summaryDone }()
	stopWatch := w.watch()
	defer stopWatch()
	// Run returns with no spawn in flight: none is using it.
	defer func() {
		if w.null != nil {
			w.null.Close()
		}
	}()
	w.log.Info("worker.started", "worker", w.id, "concurrency", w.opt.Concurrency, "queues", w.opt.Queues, "once", w.opt.Once)

	// The lease keeper renews and watches leases on its own goroutine, so
	// a slow claim or a busy store never delays a renewal.
	keeperCtx, stopKeeper := context.WithCancel(context.Background())
	var keeperDone sync.WaitGroup
	keeperDone.Add(1)
	go func() { defer keeperDone.Done(); w.keepLeases(keeperCtx) }()
	defer func() { stopKeeper(); keeperDone.Wait() }()

	w.maintain(ctx)
	w.promoteIfDue(ctx) // arms the due timer for what the pass left blocked
	defer func() { w.schedTimer.Stop() }()
	poll := time.NewTicker(w.opt.PollEvery)
	defer poll.Stop()
	cancelPoll := time.NewTicker(w.opt.CancelPoll)
	defer cancelPoll.Stop()
	hb := time.NewTicker(w.opt.HeartbeatEvery)
	defer hb.Stop()
	idleSince := time.Now()
	storeBackoff := time.Duration(0)
	// claimAfter is when a claim that failed is tried again: other
	// wake-ups (the cancel poll, every 250 ms) do not cut the backoff short.
	var claimAfter time.Time

	for {
		if ctx.Err() != nil {
			return w.stop()
		}
		drained := false
		if w.room() > 0 && !time.Now().Before(claimAfter) {
			claimed, err := w.fill(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return w.stop()
			case err != nil && w.opt.Once && w.live() == 0:
				// --once runs what it can and ends: a store it cannot claim
				// from (full, read-only, locked past the busy timeout) is a
				// failure to report, not something to wait out for ever.
				w.log.Error("store.error", "op", "claim", "error", err.Error())
				w.log.Info("worker.stopped", "worker", w.id, "why", "store error (--once)")
				return fmt.Errorf("claim: %w", err)
			case err != nil:
				storeBackoff = min(max(2*storeBackoff, 100*time.Millisecond), 5*time.Second)
				claimAfter = time.Now().Add(storeBackoff)
				w.log.Error("store.error", "op", "claim", "error", err.Error(), "retry_in", storeBackoff.String())
			default:
				storeBackoff, claimAfter = 0, time.Time{}
				drained = !claimed || w.live() < w.opt.Concurrency && w.room() > 0
			}
		}
		if w.live() > 0 {
			idleSince = time.Now()
		}
		if w.opt.Once && drained && w.live() == 0 {
			w.log.Info("worker.stopped", "worker", w.id, "why", "nothing left to run (--once)")
			return nil
		}
		if w.opt.IdleExit > 0 && w.live() == 0 && time.Since(idleSince) >= w.opt.IdleExit {
			w.log.Info("worker.stopped", "worker", w.id, "why", "idle (--idle-exit)")
			return nil
		}
		w.watching(w.room() > 0)
		var idle <-chan time.Time
		if w.opt.IdleExit > 0 && w.live() == 0 {
			idle = time.After(w.opt.IdleExit - time.Since(idleSince))
		}
		var retry <-chan time.Time
		next := claimAfter
		if w.spawnAfter.After(next) {
			next = w.spawnAfter
		}
		if d := time.Until(next); d > 0 {
			retry = time.After(d)
		}
		var startC, dueC <-chan time.Time
		if w.startArmed {
			startC = w.startTimer.C
		}
		if w.dueArmed {
			dueC = w.dueTimer.C
		}
		var schedC <-chan time.Time
		if w.schedTimer != nil {
			schedC = w.schedTimer.C
		}
		select {
		case <-ctx.Done():
		case r := <-w.exited:
			w.finish(ctx, r)
		case sp := <-w.spawnedC:
			w.adopt(ctx, &sp)
		case <-startC:
			w.flushStarts(ctx)
		case <-dueC:
			w.dueArmed = false
			w.promoteIfDue(ctx)
		case <-w.wake:
			// A write may have been a delayed task or a retry's backoff.
			if !w.dueArmed {
				w.promoteIfDue(ctx)
			}
		case <-poll.C:
			w.promoteIfDue(ctx)
			w.sweepOrphans(true)
		case <-cancelPoll.C:
			w.checkCancels(ctx)
		case <-hb.C:
			w.maintain(ctx)
		case <-schedC:
			w.fireSchedules(ctx)
		case <-idle:
		case <-retry:
		}
	}
}

// saveSummary queues a run's summary.json; if the queue is full it is
// written at once.
func (w *Worker) saveSummary(r queue.Run) {
	select {
	case w.summaries <- r:
	default:
		maintenance.SaveSummary(w.opt.Home, r)
	}
}

// live is the number of runs this worker holds, spawns in flight
// included (loop goroutine only).
func (w *Worker) live() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs) + w.inflight
}

// fill claims until the slots are full or nothing is runnable. It reports
// whether it claimed anything.
func (w *Worker) fill(ctx context.Context) (bool, error) {
	claimed := false
	if w.opt.Home != "" {
		var err error
		if spool.Pending(w.opt.Home) {
			_, err = w.st.DrainSpool(ctx, w.opt.Home)
			if err != nil && !fsutil.IsUnsafe(err) {
				return false, err
			}
		}
		// A refused spool file stays refused until someone removes it;
		// the tasks already stored are run meanwhile.
		w.noteSpool(err)
	}
	for w.room() > 0 {
		// A read first: an idle worker's poll must not take the write lock.
		ok, err := w.st.HasRunnable(ctx)
		if err != nil {
			return claimed, err
		}
		if !ok {
			return claimed, nil
		}
		cs, err := w.st.ClaimN(ctx, w.claimParams(), w.room())
		if err != nil {
			return claimed, err
		}
		if len(cs) == 0 {
			return claimed, nil
		}
		claimed = true
		w.launch(cs)
	}
	return claimed, nil
}

// room is how many more runs the worker may claim now (loop goroutine
// only): none while spawns are failing for want of resources and their
// backoff lasts, else up to its current limit.
func (w *Worker) room() int {
	if time.Now().Before(w.spawnAfter) {
		return 0
	}
	return max(min(w.limit, w.opt.Concurrency)-w.live(), 0)
}

// spawnsFailing lowers the limit to the runs the worker holds (at least
// one, so that it keeps trying) and backs its claims off, after a spawn
// failed for the worker's own want of resources (loop goroutine only).
func (w *Worker) spawnsFailing() {
	w.limit = max(w.live(), 1)
	w.spawnBackoff = min(max(2*w.spawnBackoff, 100*time.Millisecond), 5*time.Second)
	w.spawnAfter = time.Now().Add(w.spawnBackoff)
	w.log.Warn("worker.throttled", "limit", w.limit, "retry_in", w.spawnBackoff.String())
}

// spawnsSucceeding raises the limit by one after a spawn succeeded, back
// to Concurrency (loop goroutine only).
func (w *Worker) spawnsSucceeding() {
	w.spawnBackoff = 0
	if w.limit < w.opt.Concurrency {
		w.limit++
		if w.limit == w.opt.Concurrency {
			w.log.Info("worker.unthrottled", "limit", w.limit)
		}
	}
}

// claimParams says who this worker is and what it takes.
func (w *Worker) claimParams() queue.ClaimParams {
	return queue.ClaimParams{Worker: w.id, Host: w.host, Queues: w.opt.Queues, Lease: w.opt.Lease}
}

// maintain runs the in-process maintenance pass; a system with workers and
// no cron still heals.
func (w *Worker) maintain(ctx context.Context) {
	r, err := maintenance.Pass(ctx, w.st, maintenance.Options{Home: w.opt.Home, Host: w.host})
	// Armed whatever the pass's outcome: the schedules' look runs on.
	defer func() { w.armSchedules(r.NextSlot) }()
	if fsutil.IsUnsafe(err) {
		// The rest of the pass ran (see maintenance.Pass).
		w.noteSpool(err)
		err = nil
	}
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("store.error", "op", "heartbeat", "error", err.Error())
		}
		return
	}
	if r.Reaped > 0 || r.Promoted > 0 || r.Drained > 0 || r.Fired > 0 {
		w.log.Info("heartbeat", "drained", r.Drained, "reaped", r.Reaped, "killed", r.Killed, "promoted", r.Promoted,
			"schedule_tasks", r.Fired)
	}
}

// scheduleCheck bounds the wait for the schedules' next slot, so that a
// schedule added meanwhile (by another process) is seen within it.
const scheduleCheck = 5 * time.Second

// fireSchedules takes the schedules' slots due (docs/schedules.md), then
// waits for the next.
func (w *Worker) fireSchedules(ctx context.Context) {
	r, err := w.st.FireSchedules(ctx)
	if err != nil && ctx.Err() == nil {
		w.log.Error("store.error", "op", "schedules", "error", err.Error())
	}
	if r.Fired > 0 || r.Skipped > 0 {
		w.log.Info("schedules.fired", "tasks", r.Fired, "skipped", r.Skipped)
	}
	w.armSchedules(r.Next)
}

// armSchedules sets the schedules' timer for next (zero: none known),
// within scheduleCheck; never sooner than 100 ms, so that a store whose
// clock runs behind this host's is not asked in a loop.
func (w *Worker) armSchedules(next time.Time) {
	d := scheduleCheck
	if !next.IsZero() {
		d = min(d, max(time.Until(next), 100*time.Millisecond))
	}
	if w.schedTimer == nil {
		w.schedTimer = time.NewTimer(d)
		return
	}
	w.schedTimer.Reset(d)
}

// noteSpool logs a refused spool file (err, an *fsutil.UnsafeError) the
// first time it is met, and forgets it once a drain works (err nil).
func (w *Worker) noteSpool(err error) {
	if err == nil {
		w.spoolRefused = ""
		return
	}
	if msg := err.Error(); msg != w.spoolRefused {
		w.spoolRefused = msg
		w.log.Error("spool.refused", "error", msg)
	}
}

// promoteIfDue returns due blocked tasks to todo without waiting for the
// next maintenance pass, so a short backoff is honoured on time.
func (w *Worker) promoteIfDue(ctx context.Context) {
	at, ok, err := w.st.NextDue(ctx)
	if err != nil || !ok {
		return
	}
	if wait := at.Sub(w.st.Now()); wait > 0 {
		// Due before the next poll: a timer, so that a short backoff or
		// a delay is honoured to the millisecond, not to the poll.
		if wait < w.opt.PollEvery {
			w.dueTimer.Reset(wait + time.Millisecond)
			w.dueArmed = true
		}
		return
	}
	if n, err := w.st.PromoteDue(ctx); err == nil && n > 0 {
		w.log.Info("tasks.promoted", "count", n)
	}
}

// checkCancels notices runs a user is cancelling and stops them, and
// applies queue time limits changed meanwhile.
func (w *Worker) checkCancels(ctx context.Context) {
	if w.live() == 0 {
		return
	}
	w.applyQueueTimeouts(ctx)
	w.flushProgress(ctx)
	ids, err := w.st.CancellingRuns(ctx, w.id)
	if err != nil {
		return
	}
	for _, id := range ids {
		w.mu.Lock()
		r := w.runs[id]
		w.mu.Unlock()
		if r != nil && r.kill(killCancel, w.opt.Grace) {
			w.log.Info("run.cancelling", "task", r.c.TaskID, "run", r.c.RunID)
		}
	}
}

// applyQueueTimeouts makes a queue's --timeout take effect at once
// (docs/semantics.md, Timeouts): a live run whose limit is its queue's (its task sets none)
// gets the queue's current limit, counted from the run's start; one
// already past it is stopped now as timed out.
func (w *Worker) applyQueueTimeouts(ctx context.Context) {
	limits, err := w.st.QueueTimeouts(ctx)
	if err != nil {
		return
	}
	for _, r := range w.liveRuns() {
		if d, ok := limits[r.c.Queue]; ok && r.c.Spec.Timeout == "" && d != r.c.Timeout {
			r.setTimeout(d, w.opt.Grace, w.askedFor(r))
			w.log.Info("run.timeout_changed", "task", r.c.TaskID, "run", r.c.RunID, "timeout", d.String())
		}
	}
}

// watch wakes the loop whenever the database or the spool is written: an
// idle worker starts new work within milliseconds without polling hard.
// A store that notifies its changes (PostgreSQL) wakes it through its
// notifications; the spool's folder is watched still.
func (w *Worker) watch() func() {
	stopFiles := w.watchFiles()
	wake, stopWake := w.st.Backend().Wakeups(context.Background())
	if wake == nil {
		return func() { stopFiles(); stopWake() }
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-wake:
				w.poke()
			}
		}
	}()
	return func() { close(done); stopWake(); stopFiles() }
}

// watchFiles watches the database's folder (SQLite) and the home's.
func (w *Worker) watchFiles() func() {
	dirs := map[string]bool{}
	if w.opt.DBPath != "" {
		dirs[filepath.Dir(w.opt.DBPath)] = true
	}
	if w.opt.Home != "" {
		dirs[w.opt.Home] = true
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		w.log.Warn("watch.unavailable", "error", err.Error())
		return func() {}
	}
	w.watcher = fw
	for d := range dirs {
		w.watched = append(w.watched, d)
	}
	w.watching(true)
	done := make(chan struct{})
	var rechecking atomic.Bool
	go func() {
		for {
			select {
			case <-done:
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Create) {
					w.poke()
					// The event comes with the write of the WAL frames,
					// a moment before the commit is visible to readers;
					// look again shortly so that a commit seen too early
					// is not left to the fallback poll.
					if !rechecking.Swap(true) {
						time.AfterFunc(2*time.Millisecond, w.poke)
						time.AfterFunc(15*time.Millisecond, func() { rechecking.Store(false); w.poke() })
					}
				}
			case _, ok := <-fw.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return func() { close(done); fw.Close() }
}

// watching turns the folder watch on or off (on the loop's goroutine).
// While every slot is busy the loop has nothing to claim, and each of the
// store's writes (a dozen per run, most of them the worker's own) would
// otherwise wake it for nothing. Turning it back on pokes the loop once:
// a commit made while it was off is seen by that look.
func (w *Worker) watching(on bool) {
	if w.watcher == nil || on == w.watchOn {
		return
	}
	w.watchOn = on
	for _, d := range w.watched {
		var err error
		if on {
			err = w.watcher.Add(d)
		} else {
			err = w.watcher.Remove(d)
		}
		if err != nil && on {
			w.log.Warn("watch.unavailable", "dir", d, "error", err.Error())
		}
	}
	if on {
		w.poke()
	}
}

// stop is the graceful stop: no more claims; wait up to Grace for the
// runs; then SIGTERM their groups, SIGKILL 2 s later, and release them
// (task back to todo, no budget spent).
func (w *Worker) stop() error {
	ctx := context.Background()
	w.stopping = true
	w.flushStarts(ctx)
	w.log.Info("worker.stopping", "worker", w.id, "running", w.live(), "grace", w.opt.Grace.String())
	w.denyQuestions(ctx)
	deadline := time.After(w.opt.Grace)
	// A user's cancel is still noticed within a second while the runs
	// have their grace.
	cancelPoll := time.NewTicker(w.opt.CancelPoll)
	defer cancelPoll.Stop()
	for w.live() > 0 {
		var startC <-chan time.Time
		if w.startArmed {
			startC = w.startTimer.C
		}
		select {
		case r := <-w.exited:
			w.finish(ctx, r)
		case sp := <-w.spawnedC:
			w.adopt(ctx, &sp)
		case <-startC:
			w.flushStarts(ctx)
		case <-cancelPoll.C:
			w.checkCancels(ctx)
		case <-deadline:
			if w.killAll == "" {
				w.killAll = killRelease
				w.mu.Lock()
				for _, r := range w.runs {
					r.kill(killRelease, 2*time.Second)
				}
				w.mu.Unlock()
			}
		}
	}
	w.log.Info("worker.stopped", "worker", w.id, "why", "signal")
	return nil
}

// liveRuns snapshots the worker's live runs.
func (w *Worker) liveRuns() []*run {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*run, 0, len(w.runs))
	for _, r := range w.runs {
		out = append(out, r)
	}
	return out
}

// tracks reports whether r is still among the worker's live runs (a run
// leaves them when its process ended, before its end is recorded).
func (w *Worker) tracks(r *run) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[r.c.RunID] == r
}

// keepLeases renews every live run's lease each Lease/3. A renewal may
// block (the store busy or unreachable), so the 2/3-TTL deadline is
// watched by watchLeases on a goroutine of its own that never touches the
// store, and the worker's own row is kept by keepSeen on another, so
// that its write never delays a renewal.
func (w *Worker) keepLeases(ctx context.Context) {
	go w.watchLeases(ctx)
	// Waited for: a write of the row after the clean stop's delete
	// would list this worker as live for another lease TTL.
	var seen sync.WaitGroup
	seen.Add(1)
	go func() { defer seen.Done(); w.keepSeen(ctx) }()
	defer seen.Wait()
	every := w.opt.Lease / 3
	tick := time.NewTicker(min(every/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, r := range w.liveRuns() {
			if r.isLost() || time.Since(r.renewedAt()) < every {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			ren, err := w.st.RenewLease(rctx, r.c.RunID, r.c.Token, w.opt.Lease)
			cancel()
			switch {
			case err == nil:
				r.renewed(time.Now())
				if ren.State == queue.RunCancelling {
					r.kill(killCancel, w.opt.Grace)
				}
			case queue.IsConflict(err) && w.tracks(r):
				// Refused while the run is still this worker's: the lease
				// is gone. A run that ended meanwhile was refused because
				// its end was recorded, and its group is gone already.
				w.lose(r, err.Error())
			case queue.IsConflict(err):
			case ctx.Err() == nil:
				w.log.Error("store.error", "op", "renew", "run", r.c.RunID, "error", err.Error())
			}
		}
	}
}

// workerParams is what the workers table says of this worker.
func (w *Worker) workerParams() queue.WorkerParams {
	return queue.WorkerParams{ID: w.id, Host: w.host, PID: os.Getpid(), Queues: w.opt.Queues,
		Concurrency: w.opt.Concurrency, Lease: w.opt.Lease}
}

// keepSeen writes the worker's row each Lease/3, as the leases of its
// runs are renewed: it counts as live until a lease TTL passes without
// one.
func (w *Worker) keepSeen(ctx context.Context) {
	every := w.opt.Lease / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sctx, cancel := context.WithTimeout(ctx, every)
		err := w.st.WorkerSeen(sctx, w.workerParams())
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.Error("store.error", "op", "worker.seen", "error", err.Error())
		}
	}
}

// watchLeases kills the process group of any run whose lease has not been
// renewed for 2/3 of the TTL, so the old process is gone before anyone
// else may take the task, and the worker writes nothing more for it.
func (w *Worker) watchLeases(ctx context.Context) {
	tick := time.NewTicker(max(min(w.opt.Lease/15, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, r := range w.liveRuns() {
			since := time.Since(r.renewedAt())
			switch {
			case since >= 2*w.opt.Lease/3:
				w.lose(r, "lease not renewed for 2/3 of its TTL")
			case since >= w.opt.Lease/3+w.opt.Lease/6 && r.warnOverdue():
				w.log.Warn("lease.renew_overdue", "task", r.c.TaskID, "run", r.c.RunID, "since_renewal", since.Round(time.Millisecond).String())
			}
		}
	}
}

// lose gives up a run whose lease is gone: its group is killed at once and
// nothing more is written for it.
func (w *Worker) lose(r *run, why string) {
	if r.markLost() {
		w.log.Error("run.lost", "task", r.c.TaskID, "run", r.c.RunID, "why", why)
		r.kill(killLost, 0)
	}
}

// signalGroup sends sig to the process group pgid.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// runEnviron is the environment a run starts from: the worker's, less
// CQ_PAYLOAD_FILE, which only an intent's run has (its own): a worker
// started from inside a handler must not hand its payload to every task.
// CQ_TASK_ID, CQ_RUN_ID, CQ_ATTEMPT and CQ_HOME are set for each run.
func runEnviron(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CQ_PAYLOAD_FILE=") {
			out = append(out, kv)
		}
	}
	return out
}
