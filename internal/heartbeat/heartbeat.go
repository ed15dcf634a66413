// Package heartbeat is the maintenance pass that cron runs through
// cq heartbeat and every worker runs in-process on a timer. Every step is a
// compare-and-set in the store, so passes may overlap safely.
package heartbeat

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"syscall"

	"github.com/cq-dev/cq/internal/queue"
)

// Result counts what one pass did.
type Result struct {
	Drained      int    `json:"drained"`
	Reaped       int    `json:"reaped"`
	Killed       int    `json:"killed"`
	StartTimeout int    `json:"start_timeouts"`
	Promoted     int    `json:"promoted"`
	Cancelled    int    `json:"cancelled"`
	Warned       int    `json:"warned"`
	Health       string `json:"health"`
}

// Options tune a pass.
type Options struct {
	// Home is the home folder whose spool is drained.
	Home string
	// Host is this machine's name: lost runs recorded on it get their
	// process group killed.
	Host string
}

// Pass runs one maintenance pass (SPEC section 8): it drains the spool,
// reaps runs whose lease expired (killing their process groups left on
// this host), times out runs not started within their queue's start
// timeout, promotes blocked tasks that nothing blocks any more, cancels
// dependents of failed or cancelled tasks, warns once about tasks waiting
// too long, and records last_heartbeat, queue_length and health in
// system_state.
func Pass(ctx context.Context, st *queue.Store, opt Options) (Result, error) {
	var r Result
	var err error
	if opt.Home != "" {
		if r.Drained, err = st.DrainSpool(ctx, opt.Home); err != nil {
			return r, err
		}
	}
	reaped, err := st.ReapExpired(ctx)
	if err != nil {
		return r, err
	}
	r.Reaped = len(reaped)
	for _, rp := range reaped {
		if rp.Host != "" && rp.Host == opt.Host && KillRunGroup(rp.Pgid, rp.RunID) {
			r.Killed++
		}
	}
	if r.StartTimeout, err = st.TimeoutQueuedRuns(ctx); err != nil {
		return r, err
	}
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
	if r.Warned, err = st.WarnWaiting(ctx); err != nil {
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
	err = st.SetSystemState(ctx, map[string]string{"queue_length": strconv.Itoa(h.Backlog), "health": h.Status})
	return r, err
}

// KillRunGroup SIGKILLs the process group pgid if a member of it still
// belongs to run runID: its environment must hold CQ_RUN_ID=runID, so a
// recycled pid or group id is never killed by mistake. Members other than
// the leader count, since a pipeline's leader may be gone while its
// grandchildren live on. It reports whether it sent the signal.
func KillRunGroup(pgid int, runID string) bool {
	if pgid <= 1 || runID == "" {
		return false
	}
	want := []byte("CQ_RUN_ID=" + runID)
	for _, pid := range groupMembers(pgid) {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				return syscall.Kill(-pgid, syscall.SIGKILL) == nil
			}
		}
	}
	return false
}

// groupMembers lists the pids whose process group is pgid, leader first.
func groupMembers(pgid int) []int {
	members := []int{pgid}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return members
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold anything: state ppid pgrp …
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		f := bytes.Fields(rest)
		if len(f) > 2 {
			if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
				members = append(members, pid)
			}
		}
	}
	return members
}
