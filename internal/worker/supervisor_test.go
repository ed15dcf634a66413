package worker

import (
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleeper starts `sleep 60` in a process group of its own with
// CQ_RUN_ID=runID; the channel closes when it has exited.
func sleeper(t *testing.T, runID string) chan struct{} {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "CQ_RUN_ID="+runID)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return done
}

// TestSupervisorKillsRunsNotYetStarted: a run the worker announced before
// its process started (process group 0) is still killed, by CQ_RUN_ID,
// when the worker's pipe ends; a run it took back is left alone.
func TestSupervisorKillsRunsNotYetStarted(t *testing.T) {
	defer signal.Reset(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	announced := sleeper(t, "run-announced")
	withdrawn := sleeper(t, "run-withdrawn")
	if code := RunSupervisor(strings.NewReader("+0 run-announced\n+0 run-withdrawn\n-0 run-withdrawn\n")); code != 0 {
		t.Fatalf("RunSupervisor = %d", code)
	}
	select {
	case <-announced:
	case <-time.After(30 * time.Second):
		t.Error("the announced run's process is alive 30s after the pipe ended")
	}
	select {
	case <-withdrawn:
		t.Error("the process of a run the worker took back was killed")
	default:
	}
}
