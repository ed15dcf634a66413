package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/procs"
	"github.com/cq-dev/cq/internal/queue"
	"golang.org/x/sys/unix"
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
	timer   *time.Timer
	// pidfd is the process's pidfd (-1 where the kernel has none); ws
	// and waitErr are how it ended (waitErr: it could not be waited for).
	pidfd   int
	pid     int
	reaped  atomic.Bool
	ws      syscall.WaitStatus
	waitErr error

	mu        sync.Mutex
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
func (r *run) setTimeout(d, grace time.Duration) {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.c.Timeout = d
	if d > 0 {
		r.timer = time.AfterFunc(max(d-time.Since(r.started), 0), func() { r.kill(killTimeout, grace) })
	}
}

// wait waits for the run's process to end and reaps it. With a pidfd the
// wait is the runtime's poller's: no thread sits blocked in waitid for
// each live run (at 2000 runs a second, those threads and the scheduler's
// hand-offs around them cost more than the runs). Without one (kernels
// before 5.3) it is exec.Cmd.Wait.
func (r *run) wait() {
	defer r.reaped.Store(true)
	defer func() { _ = r.cmd.Process.Release() }()
	if r.pidfd >= 0 {
		if err := syscall.SetNonblock(r.pidfd, true); err == nil {
			f := os.NewFile(uintptr(r.pidfd), "pidfd")
			r.pidfd = -1
			defer f.Close()
			if rc, err := f.SyscallConn(); err == nil {
				pid := r.pid
				var werr error
				err := rc.Read(func(uintptr) bool {
					var got int
					for {
						got, werr = syscall.Wait4(pid, &r.ws, syscall.WNOHANG, nil)
						if !errors.Is(werr, syscall.EINTR) {
							break
						}
					}
					if got == pid {
						// Reaped: from now on the pid may name another
						// process, and exited() must not ask about it.
						r.reaped.Store(true)
						return true
					}
					return werr != nil
				})
				if err == nil && werr == nil {
					return
				}
				if werr == nil {
					werr = err
				}
				// ECHILD: reaped elsewhere (cannot happen: nothing else
				// waits for it); report it as a wait failure.
				r.waitErr = fmt.Errorf("wait: %w", werr)
				return
			}
		}
		r.closePidfd()
	}
	err := r.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.ws = 0
	case errors.As(err, &ee):
		r.ws, _ = ee.Sys().(syscall.WaitStatus)
	default:
		r.waitErr = err
	}
}

// closePidfd closes the pidfd unless wait took it.
func (r *run) closePidfd() {
	if r.pidfd >= 0 {
		_ = syscall.Close(r.pidfd)
		r.pidfd = -1
	}
}

// exited reports, without reaping it, whether the run's process has
// already ended (or been reaped by its waiting goroutine).
func (r *run) exited() bool {
	if r.reaped.Load() {
		return true
	}
	if r.pid == 0 {
		return false
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, r.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD)
	}
	// Linux zeroes info when no child is waitable; SIGCHLD marks one that is.
	return info.Signo == int32(unix.SIGCHLD)
}

// spawn starts a claimed task's process in its own process group, its
// output going straight to the run's files. It returns the run, or the
// outcome to record when the process could not be started.
func (w *Worker) spawn(c *queue.Claimed) (*run, *queue.Outcome) {
	r := &run{c: c, dir: filepath.Join(w.opt.Home, "runs", c.RunID)}
	fail := func(class, msg string) (*run, *queue.Outcome) {
		w.log.Warn("run.spawn_failed", "task", c.TaskID, "run", c.RunID, "error", msg)
		return r, &queue.Outcome{State: queue.RunFailed, Class: class, Error: msg}
	}
	// The worker's own want of resources is not the task's failure: the
	// run is given back (no budget spent) and the worker claims less.
	giveBack := func(what string, err error) (*run, *queue.Outcome) {
		msg := what + ": " + err.Error() + " (the worker's own limit; the task was given back)"
		w.log.Warn("run.spawn_deferred", "task", c.TaskID, "run", c.RunID, "error", msg)
		r.giveBack = true
		return r, &queue.Outcome{State: queue.RunCancelled, Error: msg}
	}
	// A failed write (disk full) does not stop the run.
	// Output that cannot be kept goes to /dev/null, and the run's error
	// says so; only an intent, whose payload needs the folder, fails.
	// The runs folder and the run's own are cq's: a symbolic link at
	// either is refused, or the logs would be written elsewhere.
	dirErr := fsutil.OwnDir(filepath.Dir(r.dir))
	if dirErr == nil {
		dirErr = fsutil.OwnDir(r.dir)
	}
	if dirErr != nil {
		r.outputLost = "output lost: run folder: " + dirErr.Error()
	}
	var err error
	logFile := func(name string) (*os.File, error) {
		if r.outputLost == "" {
			f, err := fsutil.OpenPrivate(filepath.Join(r.dir, name), os.O_WRONLY|os.O_TRUNC)
			if err == nil || isResourceErr(err) {
				return f, err
			}
			r.outputLost = "output lost: " + name + ": " + err.Error()
		}
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if r.stdout, err = logFile("stdout.log"); err != nil {
		if isResourceErr(err) {
			return giveBack("stdout", err)
		}
		return fail(queue.ClassTransient, "stdout: "+err.Error())
	}
	if r.stderr, err = logFile("stderr.log"); err != nil {
		r.stdout.Close()
		if isResourceErr(err) {
			return giveBack("stderr", err)
		}
		return fail(queue.ClassTransient, "stderr: "+err.Error())
	}
	closeFiles := func() {
		r.stdout.Close()
		r.stderr.Close()
	}

	sp := c.Spec
	env := w.environ[:len(w.environ):len(w.environ)]
	for k, v := range sp.Env {
		env = append(env, k+"="+v)
	}
	// cq's own variables come last, so a spec's env cannot replace them
	// (the last of duplicate keys wins): CQ_RUN_ID is how a lost run's
	// processes are found and killed.
	env = append(env, "CQ_TASK_ID="+c.TaskID, "CQ_RUN_ID="+c.RunID, "CQ_ATTEMPT="+strconv.Itoa(c.Attempt), "CQ_HOME="+w.opt.Home)
	var argv []string
	stdin := os.DevNull
	switch {
	case sp.Shell != "":
		argv = []string{"/bin/sh", "-c", sp.Shell}
	case sp.Intent != "":
		path, msg := w.handler(sp.Intent)
		if msg != "" {
			closeFiles()
			// A missing handler fails the run and is not retried.
			return fail(queue.ClassNone, msg)
		}
		payload := filepath.Join(r.dir, "payload.json")
		body := []byte(sp.Payload)
		if len(body) == 0 {
			body = []byte("null")
		}
		err := dirErr
		if err == nil {
			err = writePrivate(payload, body)
		}
		if err != nil {
			closeFiles()
			if isResourceErr(err) {
				return giveBack("payload", err)
			}
			return fail(queue.ClassTransient, "payload: "+err.Error())
		}
		argv, stdin = []string{path}, payload
		env = append(env, "CQ_PAYLOAD_FILE="+payload)
	default:
		argv = sp.Cmd
	}
	in := w.devNull()
	if in == nil || stdin != os.DevNull {
		if stdin == os.DevNull {
			in, err = os.Open(stdin)
		} else {
			// The payload cq wrote just now, in the run's own folder.
			in, err = fsutil.OpenExisting(stdin, os.O_RDONLY)
		}
		if err != nil {
			closeFiles()
			if isResourceErr(err) {
				return giveBack("stdin", err)
			}
			return fail(queue.ClassTransient, "stdin: "+err.Error())
		}
		defer in.Close()
	}
	cmd := w.command(argv)
	if cmd.Err != nil {
		closeFiles()
		if isResourceErr(cmd.Err) {
			return giveBack("spawn", cmd.Err)
		}
		// Not found in the worker's PATH (or not executable there): no
		// retry would find it, so the run fails at once.
		if errors.Is(cmd.Err, exec.ErrNotFound) {
			return fail(queue.ClassNone, fmt.Sprintf("cannot start: command not found: %s (not in the worker's PATH)", argv[0]))
		}
		return fail(queue.ClassNone, "cannot start: "+cmd.Err.Error())
	}
	cmd.Env, cmd.Dir = env, sp.Cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, r.stdout, r.stderr
	// Its own process group, so that timeouts, cancels and the supervisor
	// reach grandchildren; the parent-death signal is a first line of
	// defence for the direct child.
	r.pidfd = -1
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &r.pidfd}
	w.sup.expect(c.RunID)
	w.forkMu.RLock()
	err = cmd.Start()
	if err == nil {
		w.noteKid(cmd.Process.Pid, c.RunID)
	}
	w.forkMu.RUnlock()
	if err != nil {
		w.sup.del(0, c.RunID)
		w.forgetPath(argv[0])
		closeFiles()
		if isResourceErr(err) {
			return giveBack("spawn", err)
		}
		// The kernel gives the same error for a missing working folder as
		// for a missing command: name the folder when it is the cause.
		if msg := cwdProblem(sp.Cwd); msg != "" {
			return fail(queue.ClassNone, "cannot start: working folder "+msg)
		}
		if isStartErr(err) {
			return fail(queue.ClassNone, "cannot start: "+startErrText(cmd.Path, err))
		}
		return fail(queue.ClassTransient, "spawn: "+err.Error())
	}
	r.cmd, r.pid, r.pgid, r.started = cmd, cmd.Process.Pid, cmd.Process.Pid, time.Now()
	r.renewed(time.Now())
	w.sup.add(r.pgid, c.RunID)
	return r, nil
}

// devNull is /dev/null opened once for the worker's life, every run's
// stdin (an intent's excepted); nil if it cannot be opened, and each run
// then opens its own.
func (w *Worker) devNull() *os.File {
	w.nullOnce.Do(func() { w.null, _ = os.Open(os.DevNull) })
	return w.null
}

// pathTTL is how long a command name's PATH lookup is reused: a busy
// worker runs the same few commands thousands of times a second, and each
// lookup stats every PATH entry before the right one.
const pathTTL = time.Second

type pathEntry struct {
	path string
	at   time.Time
}

// command is exec.Command with the PATH lookup of a bare command name
// reused for pathTTL (the worker's own PATH, as exec.Command uses).
func (w *Worker) command(argv []string) *exec.Cmd {
	name := argv[0]
	if strings.Contains(name, "/") {
		return exec.Command(name, argv[1:]...)
	}
	w.pathMu.Lock()
	e, ok := w.paths[name]
	w.pathMu.Unlock()
	if !ok || time.Since(e.at) > pathTTL {
		cmd := exec.Command(name, argv[1:]...)
		if cmd.Err == nil && filepath.IsAbs(cmd.Path) {
			w.pathMu.Lock()
			w.paths[name] = pathEntry{cmd.Path, time.Now()}
			w.pathMu.Unlock()
		}
		return cmd
	}
	// As exec.Command builds it once LookPath has answered.
	return &exec.Cmd{Path: e.path, Args: argv}
}

// forgetPath drops a cached lookup whose start failed: the next run of
// that name looks it up again.
func (w *Worker) forgetPath(name string) {
	w.pathMu.Lock()
	delete(w.paths, name)
	w.pathMu.Unlock()
}

// spawned is a spawn's result, sent from its goroutine to the loop.
type spawned struct {
	r *run
	o *queue.Outcome // set when the process could not be started
}

// launch starts claimed tasks, each on a goroutine of its own: creating a
// run's folder and files and forking take longer than the transaction
// that records the ends of other runs, and the loop goes on with those
// meanwhile. Until the loop adopts its result (see adopt), a spawn counts
// as live in w.inflight, so that no slot is claimed twice.
func (w *Worker) launch(claims []*queue.Claimed) {
	for _, c := range claims {
		w.inflight++
		go func() {
			w.spawning <- struct{}{}
			r, o := w.spawn(c)
			<-w.spawning
			if o != nil {
				w.spawnedC <- spawned{r: r, o: o}
				return
			}
			if c.Timeout > 0 {
				r.timer = time.AfterFunc(c.Timeout, func() { r.kill(killTimeout, w.opt.Grace) })
			}
			// The loop receives this before the exit below: it adopts
			// every spawn waiting in spawnedC before it reads an exit.
			w.spawnedC <- spawned{r: r}
			r.wait()
			r.endedAt = time.Now()
			w.forgetKid(r.pid)
			w.exited <- r
		}()
	}
}

// adopt takes in the spawns that have finished, sp first: their runs are
// live from here on, and their starts (queued → running) are recorded by
// the next transaction the loop makes, usually the one recording how
// another run ended, or by flushStarts within startDelay. A spawn that
// failed is recorded as the run's end at once.
func (w *Worker) adopt(ctx context.Context, sp *spawned) {
	var batch []spawned
	if sp != nil {
		batch = append(batch, *sp)
	}
drain:
	for {
		select {
		case s := <-w.spawnedC:
			batch = append(batch, s)
		default:
			break drain
		}
	}
	var failed []ending
	for _, s := range batch {
		w.inflight--
		r := s.r
		if s.o != nil {
			failed = append(failed, ending{r: r, f: queue.Finish{RunID: r.c.RunID, Token: r.c.Token, Outcome: *s.o, Release: r.giveBack}})
			if r.giveBack {
				w.spawnsFailing()
			}
		} else {
			w.spawnsSucceeding()
			w.mu.Lock()
			w.runs[r.c.RunID] = r
			w.mu.Unlock()
			w.pending = append(w.pending, r)
			if w.killAll != "" {
				// A graceful stop's grace is over: this one goes too.
				r.kill(w.killAll, 2*time.Second)
			}
		}
	}
	if len(w.pending) > 0 && !w.startArmed {
		w.startArmed = true
		w.startTimer.Reset(startDelay)
	}
	if len(failed) > 0 {
		w.record(ctx, failed, 0)
	}
}

// handler finds the intent's executable in the handlers folder; the
// message says why it cannot run.
func (w *Worker) handler(name string) (string, string) {
	if !queue.ValidIntent(name) {
		return "", fmt.Sprintf("missing handler: invalid intent name %q", name)
	}
	dir := w.opt.Handlers
	if dir == "" {
		dir = filepath.Join(w.opt.Home, "handlers")
	}
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Sprintf("missing handler: no executable %s", path)
	}
	return path, ""
}

func writePrivate(path string, body []byte) error {
	f, err := fsutil.OpenPrivate(path, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

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
	if r.timer != nil {
		r.timer.Stop()
	}
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
	return e, true
}

// record writes the pending starts, runs' ends and claims of up to claimN
// tasks in one commit, retrying while the store is unreachable and the
// leases hold; it logs each start and end, writes summary.json files, and
// returns the claims. A refused start's group is killed (see started).
func (w *Worker) record(ctx context.Context, ends []ending, claimN int) []*queue.Claimed {
	fs := make([]queue.Finish, len(ends))
	for i, e := range ends {
		fs[i] = e.f
	}
	pending := w.pending
	w.pending = nil
	starts := make([]queue.Start, len(pending))
	for i, r := range pending {
		starts[i] = queue.Start{RunID: r.c.RunID, Token: r.c.Token, Pid: r.pgid, Pgid: r.pgid, At: r.started}
	}
	// The oldest lease at stake bounds the retries.
	var oldest *run
	if len(pending) > 0 {
		oldest = pending[0]
	} else if len(ends) > 0 {
		oldest = ends[0].r
	}
	var claim *queue.ClaimN
	if claimN > 0 {
		claim = &queue.ClaimN{Params: w.claimParams(), N: claimN}
	}
	ctx = context.WithoutCancel(ctx)
	var res queue.FinishResult
	var err error
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		res, err = w.st.Cycle(ctx, starts, fs, claim)
		// Give up once the leases would be void: the runs will be reaped
		// and run again elsewhere.
		if err == nil || oldest == nil || time.Since(oldest.renewedAt()) >= 2*w.opt.Lease/3 {
			break
		}
		w.log.Error("store.error", "op", "finish", "error", err.Error(), "retry_in", delay.String())
		time.Sleep(delay)
	}
	if err != nil {
		w.log.Error("store.error", "op", "finish", "error", err.Error())
		res.StartErrs = make([]error, len(pending))
		for i := range res.StartErrs {
			res.StartErrs[i] = err
		}
		w.started(pending, res.StartErrs)
		return nil
	}
	w.started(pending, res.StartErrs)
	for i, e := range ends {
		f := res.Finished[i]
		log := w.log.With("task", e.r.c.TaskID, "run", e.r.c.RunID)
		if f.Err != nil {
			log.Warn("run.finish_refused", "error", f.Err.Error())
			continue
		}
		if e.f.Release {
			log.Info("run.released", "task_state", f.TaskState)
		} else {
			o := e.f.Outcome
			attrs := []any{"state", o.State, "task_state", f.TaskState}
			if o.ExitCode != nil {
				attrs = append(attrs, "exit_code", *o.ExitCode)
			}
			if o.Signal != "" {
				attrs = append(attrs, "signal", o.Signal)
			}
			if !e.r.started.IsZero() {
				attrs = append(attrs, "duration_seconds", time.Since(e.r.started).Seconds())
			}
			log.Info("run.finished", attrs...)
		}
		if f.Run != nil {
			w.saveSummary(*f.Run)
		}
	}
	return res.Claimed
}

// started logs the recorded starts; a run whose start the store refused
// (cancelled or taken over since the claim) is not ours to run: its group
// is killed and its end will write nothing.
func (w *Worker) started(runs []*run, errs []error) {
	for i, r := range runs {
		if errs[i] != nil {
			w.log.Warn("run.start_refused", "task", r.c.TaskID, "run", r.c.RunID, "error", errs[i].Error())
			r.markLost()
			signalGroup(r.pgid, syscall.SIGKILL)
			// Cancelled before its start was recorded: whoever ended it
			// had no folder to write its summary into, perhaps.
			if w.opt.Home != "" {
				maintenance.WriteSummary(context.Background(), w.st, w.opt.Home, r.c.TaskID, r.c.RunID)
			}
			continue
		}
		w.log.Info("run.started", "task", r.c.TaskID, "run", r.c.RunID, "attempt", r.c.Attempt, "pid", r.pgid, "queue", r.c.Queue)
	}
}

// startDelay is how long a start may wait for a transaction to ride
// with before it is recorded on its own.
const startDelay = 3 * time.Millisecond

// flushStarts records the pending starts on their own.
func (w *Worker) flushStarts(ctx context.Context) {
	w.startArmed = false
	if len(w.pending) > 0 {
		w.record(ctx, nil, 0)
	}
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
