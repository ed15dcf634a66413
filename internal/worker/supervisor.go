package worker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/procs"
)

// SupervisorArg is the hidden subcommand that runs the supervisor.
const SupervisorArg = "__supervisor"

// supervisor is the worker's side of one small helper process that
// outlives it: the worker tells it each run before its process starts,
// then the run's process group, and when the run ends; when the worker
// dies however it dies (SIGKILL included) the pipe closes and the helper
// kills every group still recorded, and every process still carrying one
// of those runs' CQ_RUN_ID. The kernel's parent-death signal would reach
// only each run's direct child; this reaches shell pipelines'
// grandchildren too. One helper per worker, not per task, so spawning
// stays cheap. A helper that dies while the worker lives is started again
// and told every run still live.
type supervisor struct {
	exe  string
	warn func(msg string, err error)

	mu      sync.Mutex
	w       io.WriteCloser
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current helper has exited
	closing bool
	// live is what the helper has been told: run id → process group (0
	// until the process exists).
	live map[string]int
}

// startSupervisor starts the helper from the cq executable exe (run with
// argv[0] "cq" so that a test binary standing in for cq dispatches too).
// warn is told when a helper that died cannot be started again.
func startSupervisor(exe string, warn func(msg string, err error)) (*supervisor, error) {
	s := &supervisor{exe: exe, warn: warn, live: map[string]int{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// pipeRoom is what a pipe surely holds before its reader starts (Linux's
// buffer is 64 KiB; POSIX promises less, but cq runs on Linux).
const pipeRoom = 60 << 10

// startLocked starts a helper, tells it every live run, and watches for
// its exit.
func (s *supervisor) startLocked() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{Path: s.exe, Args: []string{"cq", SupervisorArg}, Stdin: r}
	// Its own process group: a terminal's ^C for the worker does not reach
	// it, and it ignores such signals anyway; only the pipe's end counts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The live runs go into the pipe before the helper starts, so that a
	// worker killed the moment after leaves none of them untold. A list
	// too long for the pipe's buffer is written after the start instead.
	var told bytes.Buffer
	for id, pgid := range s.live {
		told.WriteString("+" + strconv.Itoa(pgid) + " " + id + "\n")
	}
	early := told.Len() <= pipeRoom
	if early {
		if _, err := w.Write(told.Bytes()); err != nil {
			r.Close()
			w.Close()
			return fmt.Errorf("start supervisor: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("start supervisor: %w", err)
	}
	r.Close()
	s.w, s.cmd = w, cmd
	exited := make(chan struct{})
	s.exited = exited
	if !early {
		_, _ = w.Write(told.Bytes())
	}
	go func() {
		started := time.Now()
		_ = cmd.Wait()
		close(exited)
		// A helper that dies at once is not restarted in a tight loop.
		if d := time.Since(started); d < time.Second {
			time.Sleep(time.Second - d)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closing || s.cmd != cmd {
			return
		}
		// Killed or crashed while the worker lives: start another, or the
		// runs would have no one to clean up after a SIGKILLed worker.
		s.w.Close()
		s.w, s.cmd = nil, nil
		if err := s.startLocked(); err != nil && s.warn != nil {
			s.warn("supervisor.restart_failed", err)
		}
	}()
	return nil
}

func (s *supervisor) writeLocked(op byte, pgid int, runID string) {
	if s.w != nil {
		_, _ = s.w.Write([]byte(string(op) + strconv.Itoa(pgid) + " " + runID + "\n"))
	}
}

func (s *supervisor) send(op byte, pgid int, runID string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if op == '+' {
		s.live[runID] = pgid
	} else {
		delete(s.live, runID)
	}
	s.writeLocked(op, pgid, runID)
}

// pid is the current helper's pid (0 if none).
func (s *supervisor) pid() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// expect records a run about to start: should the worker die before the
// process group is known, its processes are found by CQ_RUN_ID.
func (s *supervisor) expect(runID string) { s.send('+', 0, runID) }

// add records a run's process group to kill if the worker dies.
func (s *supervisor) add(pgid int, runID string) { s.send('+', pgid, runID) }

// del forgets a run whose process group has ended (or never started).
func (s *supervisor) del(pgid int, runID string) { s.send('-', pgid, runID) }

// close ends the helper after a clean stop: every run was deleted, so it
// kills nothing.
func (s *supervisor) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closing = true
	if s.w != nil {
		s.w.Close()
	}
	exited := s.exited
	s.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// supervisorNap is how long the helper rests after each read. A busy
// worker writes two lines per run, thousands a second; read as they come,
// each would wake the helper (a context switch on a core the runs need).
// Napping lets them gather in the pipe (64 KiB, far more than a nap's
// worth) and delays the kill after a worker's death by at most a nap.
const supervisorNap = 10 * time.Millisecond

// unhurried reads r, resting supervisorNap after each read that got
// something.
type unhurried struct{ r io.Reader }

func (u *unhurried) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if n > 0 && err == nil {
		time.Sleep(supervisorNap)
	}
	return n, err
}

// IgnoreStopSignals is the helper process's first step: only the end of
// its stdin stops it, never a terminal's or a service manager's signal.
// It is process-wide, so the helper's main calls it, not RunSupervisor.
func IgnoreStopSignals() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
}

// RunSupervisor is the helper's main: it reads "+PGID RUNID" and
// "-PGID RUNID" lines (PGID 0: the run's process is not started yet)
// until its stdin ends, then SIGKILLs every group still recorded, and
// every process that left its group but still carries one of those runs'
// CQ_RUN_ID.
func RunSupervisor(in io.Reader) int {
	// It must outlive a run that takes every process the user may have.
	reserveThreads(4)
	runs := map[string]int{} // run id → process group (0: not known)
	sc := bufio.NewScanner(&unhurried{r: in})
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		num, runID, _ := strings.Cut(line[1:], " ")
		pgid, err := strconv.Atoi(num)
		if err != nil || pgid < 0 || runID == "" {
			continue
		}
		switch line[0] {
		case '+':
			runs[runID] = pgid
		case '-':
			delete(runs, runID)
		}
	}
	ids := make([]string, 0, len(runs))
	for id, pgid := range runs {
		if pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		ids = append(ids, id)
	}
	procs.KillRuns(ids)
	return 0
}
