// Package procs finds and kills the processes of a run: its process group,
// and any process that left the group (setsid, a daemonising child) but
// still carries the run's CQ_RUN_ID in its environment.
package procs

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// KillGroup SIGKILLs the process group pgid if a member of it still
// belongs to run runID (its environment holds CQ_RUN_ID=runID), so that a
// recycled pid or group id is never killed by mistake. Members other than
// the leader count: a pipeline's leader may be gone while its children
// live on. It reports whether it sent the signal.
func KillGroup(pgid int, runID string) bool {
	if pgid <= 1 || runID == "" {
		return false
	}
	want := marker(runID)
	for _, p := range list() {
		if p.pgid == pgid && hasEnv(p.pid, want) {
			return syscall.Kill(-pgid, syscall.SIGKILL) == nil
		}
	}
	return false
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

type proc struct{ pid, pgid int }

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
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the command name, which is in parentheses and may hold
		// anything: state ppid pgrp …
		f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(f) < 3 || string(f[0]) == "Z" {
			continue
		}
		pgid, err := strconv.Atoi(string(f[2]))
		if err != nil {
			continue
		}
		out = append(out, proc{pid: pid, pgid: pgid})
	}
	return out
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
