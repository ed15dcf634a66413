// Package procs finds and kills the processes of a run: its process group,
// and any process that left the group (setsid, a daemonising child) but
// still carries the run's CQ_RUN_ID in its environment.
package procs

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/clock"
)

// KillGroup SIGKILLs the process group pgid if it is still run runID's,
// so that a recycled pid or group id is never killed by mistake: a member
// carries CQ_RUN_ID=runID in its environment (members other than the
// leader count: a pipeline's leader may be gone while its children live
// on), or the group's leader, process pgid, started between from and to,
// the run's claim and its recorded start, give or take startSlack. The
// leader is so recognised after it cleared its environment (env -i, sudo,
// su): until it exits its pid, and so the group's id, cannot be reused.
// It reports whether it sent the signal.
func KillGroup(pgid int, runID string, from, to time.Time) bool {
	if pgid <= 1 || runID == "" {
		return false
	}
	want := marker(runID)
	for _, p := range list() {
		if p.pgid == pgid && (hasEnv(p.pid, want) || p.pid == pgid && startedWithin(p.start, from, to)) {
			return syscall.Kill(-pgid, syscall.SIGKILL) == nil
		}
	}
	return false
}

// startSlack widens KillGroup's window for the leader's start: the start
// is counted in 10 ms ticks from a boot time known to ~10 ms, and the
// run's times are stored to the millisecond. Kept small: a leader that
// started just outside the window is another process that took a
// recycled pid (the run's own started between its claim and its recorded
// start); a wall clock stepped meanwhile makes the check fail closed.
const startSlack = 100 * time.Millisecond

// clockTicks is USER_HZ, the unit of /proc/PID/stat's start time: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// startedWithin reports whether a process that started ticks after boot
// started between from and to (± startSlack). Unknown times never match.
func startedWithin(ticks uint64, from, to time.Time) bool {
	if ticks == 0 || from.IsZero() || to.IsZero() {
		return false
	}
	boot := bootTime()
	if boot.IsZero() {
		return false
	}
	at := startTime(boot, ticks)
	return !at.Before(from.Add(-startSlack)) && !at.After(to.Add(startSlack))
}

// startTime is when a process that started ticks after boot started.
func startTime(boot time.Time, ticks uint64) time.Time {
	return boot.Add(time.Duration(ticks) * (time.Second / clockTicks))
}

// bootTime is when this machine booted, by the wall clock: now less the
// uptime (zero if /proc/uptime cannot be read).
func bootTime() time.Time {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return time.Time{}
	}
	up, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return time.Time{}
	}
	return clock.Wall().Add(-time.Duration(up * float64(time.Second)))
}

// KillRuns SIGKILLs every process, in any process group, whose
// environment holds CQ_RUN_ID set to one of runIDs, with its group. It
// returns how many processes it found.
func KillRuns(runIDs []string) int {
	if len(runIDs) == 0 {
		return 0
	}
	wants := make([][]byte, len(runIDs))
	for i, id := range runIDs {
		wants[i] = marker(id)
	}
	self := os.Getpid()
	n := 0
	for _, p := range list() {
		if p.pid == self {
			continue
		}
		for _, w := range wants {
			if hasEnv(p.pid, w) {
				kill(p.pid, p.pgid)
				n++
				break
			}
		}
	}
	return n
}

func marker(runID string) []byte { return []byte("CQ_RUN_ID=" + runID) }

type proc struct {
	pid, pgid int
	start     uint64 // clock ticks after boot
}

// list reads every process's pid and process group from /proc.
func list() []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := read(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// read reads process pid's group and start from /proc; ok is false if it
// is gone, a zombie, or unreadable.
func read(pid int) (p proc, ok bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return p, false
	}
	// After the command name, which is in parentheses and may hold
	// anything: state ppid pgrp … with starttime the 20th (proc(5)).
	f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	if len(f) < 20 || string(f[0]) == "Z" {
		return p, false
	}
	pgid, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return p, false
	}
	start, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return proc{pid: pid, pgid: pgid, start: start}, true
}

// environ is process pid's environment, one KEY=VALUE per entry (none if
// it cannot be read, as for a zombie).
func environ(pid int) [][]byte {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil
	}
	return bytes.Split(env, []byte{0})
}

func hasEnv(pid int, want []byte) bool {
	for _, kv := range environ(pid) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// RunOf returns the CQ_RUN_ID in process pid's environment ("" if it has
// none or cannot be read, as for a zombie).
func RunOf(pid int) string {
	id := ""
	for _, kv := range environ(pid) {
		if v, ok := bytes.CutPrefix(kv, []byte("CQ_RUN_ID=")); ok {
			id = string(v) // the last one wins, as for exec
		}
	}
	return id
}

// Kill SIGKILLs process pid and, unless it is this process's own, its
// process group.
func Kill(pid int) {
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		pgid = 0
	}
	kill(pid, pgid)
}

// kill SIGKILLs pid and its group pgid, unless that group is this
// process's own (or none).
func kill(pid, pgid int) {
	if pgid > 1 && pgid != syscall.Getpgrp() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Lives reports whether process pid may still be the one that was alive
// at t: it exists (not a zombie) and did not start after t (± startSlack;
// an unknown start counts as before). A process that started after t has
// a recycled pid.
func Lives(pid int, t time.Time) bool {
	if pid <= 0 {
		return false
	}
	p, ok := read(pid)
	if !ok {
		return false
	}
	boot := bootTime()
	if p.start == 0 || boot.IsZero() || t.IsZero() {
		return true
	}
	return !startTime(boot, p.start).After(t.Add(startSlack))
}
