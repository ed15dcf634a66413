package worker

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleeper starts `sleep 60` in a process group of its own with
// CQ_RUN_ID=runID; the channel yields how it exited, once it has.
func sleeper(t *testing.T, runID string) (*exec.Cmd, chan *os.ProcessState) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "CQ_RUN_ID="+runID)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan *os.ProcessState, 1)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); done <- cmd.ProcessState; close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	return cmd, done
}

// exitSignal waits up to 30 s for a sleeper to exit and returns the
// signal that ended it (-1 if it exited without one).
func exitSignal(t *testing.T, done chan *os.ProcessState, what string) syscall.Signal {
	t.Helper()
	select {
	case ps := <-done:
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
		return -1
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is alive 30s after it was killed", what)
		return 0
	}
}

// ignores reports whether process pid ignores sig (SigIgn in its
// /proc status), as a child of a shell's background job may.
func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

// TestSupervisorKillsRunsNotYetStarted: a run the worker announced before
// its process started (process group 0) is still killed, by CQ_RUN_ID,
// when the worker's pipe ends; a run it took back is left alone.
func TestSupervisorKillsRunsNotYetStarted(t *testing.T) {
	_, announced := sleeper(t, "run-announced")
	withdrawnCmd, withdrawn := sleeper(t, "run-withdrawn")
	if ignores(t, withdrawnCmd.Process.Pid, syscall.SIGUSR1) {
		t.Skip("skipped: sleep ignores SIGUSR1 here (inherited), so the test cannot tell who killed it")
	}
	if code := RunSupervisor(strings.NewReader("+0 run-announced\n+0 run-withdrawn\n-0 run-withdrawn\n")); code != 0 {
		t.Fatalf("RunSupervisor = %d", code)
	}
	if sig := exitSignal(t, announced, "the announced run's process"); sig != syscall.SIGKILL {
		t.Errorf("the announced run's process ended by %v (signal %d), want SIGKILL from the supervisor", sig, int(sig))
	}
	// RunSupervisor has returned, so every SIGKILL it meant is sent, and
	// the kernel marks a SIGKILLed process as dying of it before kill(2)
	// returns: a later signal never changes how it ends. So a SIGUSR1 now
	// ends the withdrawn run's process only if the supervisor spared it,
	// with no wait that could be too short.
	// ESRCH: the process is dead and reaped already.
	if err := syscall.Kill(withdrawnCmd.Process.Pid, syscall.SIGUSR1); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	if sig := exitSignal(t, withdrawn, "the withdrawn run's process"); sig != syscall.SIGUSR1 {
		t.Errorf("the process of a run the worker took back ended by %v (signal %d), not by the test's SIGUSR1: the supervisor killed it", sig, int(sig))
	}
}
