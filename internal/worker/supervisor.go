package worker

import (
	"bufio"
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
// outlives it: the worker tells it each process group it starts and ends,
// and when the worker dies however it dies (SIGKILL included) the pipe
// closes and the helper kills every group still recorded. The kernel's
// parent-death signal would reach only each run's direct child; this
// reaches shell pipelines' grandchildren too. One helper per worker, not
// per task, so spawning stays cheap.
type supervisor struct {
	mu  sync.Mutex
	w   io.WriteCloser
	cmd *exec.Cmd
}

// startSupervisor starts the helper from the cq executable exe (run with
// argv[0] "cq" so that a test binary standing in for cq dispatches too).
func startSupervisor(exe string) (*supervisor, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{"cq", SupervisorArg}, Stdin: r}
	// Its own process group: a terminal's ^C for the worker does not reach
	// it, and it ignores such signals anyway; only the pipe's end counts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	r.Close()
	return &supervisor{w: w, cmd: cmd}, nil
}

func (s *supervisor) send(op byte, pgid int, runID string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write([]byte(string(op) + strconv.Itoa(pgid) + " " + runID + "\n"))
}

// add records a run's process group to kill if the worker dies.
func (s *supervisor) add(pgid int, runID string) { s.send('+', pgid, runID) }

// del forgets a run whose process group has ended.
func (s *supervisor) del(pgid int, runID string) { s.send('-', pgid, runID) }

// close ends the helper after a clean stop: every group was deleted, so it
// kills nothing.
func (s *supervisor) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.w.Close()
	s.mu.Unlock()
	_ = s.cmd.Wait()
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

// RunSupervisor is the helper's main: it reads "+PGID RUNID" and
// "-PGID RUNID" lines until its stdin ends, then SIGKILLs every group
// still recorded, and every process that left its group but still
// carries one of those runs' CQ_RUN_ID.
func RunSupervisor(in io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	runs := map[int]string{}
	sc := bufio.NewScanner(&unhurried{r: in})
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		num, runID, _ := strings.Cut(line[1:], " ")
		pgid, err := strconv.Atoi(num)
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			runs[pgid] = runID
		case '-':
			delete(runs, pgid)
		}
	}
	ids := make([]string, 0, len(runs))
	for pgid, id := range runs {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if id != "" {
			ids = append(ids, id)
		}
	}
	procs.KillRuns(ids)
	return 0
}
