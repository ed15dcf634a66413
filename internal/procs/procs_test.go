package procs

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestLives: a process lives for a time at or after its start, not for a
// time before it (a pid recycled since), and an exited one not at all.
func TestLives(t *testing.T) {
	t.Parallel()
	self := os.Getpid()
	if !Lives(self, time.Now()) {
		t.Error("this process does not live now")
	}
	if Lives(self, time.Now().Add(-24*time.Hour*365)) {
		t.Error("this process lived a year ago: a pid that started after the time must count as recycled")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if Lives(cmd.Process.Pid, time.Now()) {
		t.Errorf("exited process %d still lives", cmd.Process.Pid)
	}
	if Lives(0, time.Now()) || Lives(-1, time.Now()) {
		t.Error("pid 0 or -1 lives")
	}
}
