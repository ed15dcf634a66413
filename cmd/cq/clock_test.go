package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/clock"
)

// testClockEnv names a file holding a duration (as "2h" or "-1h"): a cq
// run by the tests with it set reads its wall clock that far from the
// host's, so that a test steps the wall clock of every cq process it
// runs, workers included, without touching the host's or sleeping
// through hours. The shipped binary has no such hook.
const testClockEnv = "CQ_TEST_CLOCK_FILE"

// testClockReread bounds how stale a process's offset may be.
const testClockReread = 5 * time.Millisecond

func init() {
	path := os.Getenv(testClockEnv)
	if path == "" {
		return
	}
	var mu sync.Mutex
	var offset time.Duration
	var readAt time.Time
	clock.SetWall(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(readAt) >= testClockReread {
			readAt = time.Now()
			// A file being replaced keeps the offset read before.
			if b, err := os.ReadFile(path); err == nil {
				if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
					offset = d
				}
			}
		}
		// Round(0) drops the monotonic reading: a stepped wall time
		// must not measure durations as if nothing had stepped.
		return time.Now().Add(offset).Round(0)
	})
}

// stepWall sets the wall clock of e's cq processes to offset from the
// host's (see testClockEnv); it returns the host's time of the step.
func stepWall(t *testing.T, file string, offset time.Duration) time.Time {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(offset.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// TestWorkerSurvivesWallClockSteps: a step of the wall clock, forward or
// back, expires no healthy lease, kills no healthy run and runs no task
// twice (leases are judged on the boot-time clock). A worker with four
// running tasks sees its wall clock stepped 2 h forward, then 1 h back,
// then set right; after each step every lease is renewed and an explicit
// maintenance pass (cq heartbeat) reaps nothing: the runs stay running
// with their processes, and each task ends done with its one run.
func TestWorkerSurvivesWallClockSteps(t *testing.T) {
	e := wkNewSQLiteEnv(t) // on PostgreSQL, leases follow the server's clock
	clockFile := e.path("wall-offset")
	stepWall(t, clockFile, 0)
	e.env = append(e.env, testClockEnv+"="+clockFile)

	ids := []string{"t1", "t2", "t3", "t4"}
	for _, id := range ids {
		e.ok("enqueue", "--id", id, "--shell",
			`echo $$ > "started.$CQ_TASK_ID"; while [ ! -e go ]; do sleep 0.05; done`)
	}
	w := e.startWorker("w", "--concurrency", "4", "--lease", "3s")
	runs := map[string]string{} // task → run
	pids := map[string]int{}    // task → its shell
	for _, id := range ids {
		runs[id] = e.waitRunning(id, 1).ID
		e.reapLater(runs[id])
		e.waitFile("started." + id)
		b, err := os.ReadFile(e.path("started." + id))
		if err != nil {
			t.Fatal(err)
		}
		if pids[id], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("started.%s: %v", id, err)
		}
	}

	store, err := sql.Open("sqlite3", "file:"+filepath.Join(e.home, "cq.db")+"?_busy_timeout=20000")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// waitRenewed waits until every run's lease was renewed under a wall
	// clock offset from the host's, as the wall-clock equivalent of its
	// expiry shows: the lease of 3 s ends between the step's wall time
	// and a few minutes after it.
	waitRenewed := func(at time.Time, offset time.Duration) {
		t.Helper()
		lo, hi := at.Add(offset), at.Add(offset+5*time.Minute)
		e.eventually(30*time.Second, "every lease renewed after the step to "+offset.String(), func() (bool, string) {
			var late []string
			for _, id := range ids {
				var exp string
				if err := store.QueryRow(`SELECT COALESCE(lease_expires_at, '') FROM runs WHERE id = ?`, runs[id]).Scan(&exp); err != nil {
					return false, err.Error()
				}
				if x, err := time.Parse(time.RFC3339Nano, exp); err != nil || x.Before(lo) || x.After(hi) {
					late = append(late, id+" expires "+exp)
				}
			}
			return len(late) == 0, strings.Join(late, "; ") + "; worker log:\n" + w.stderr.String()
		})
	}
	// healthy runs cq heartbeat and requires every run still running with
	// its process, no lease_expired event and nothing lost by the worker.
	healthy := func(when string) {
		t.Helper()
		e.ok("heartbeat")
		for _, id := range ids {
			task := e.show(id)
			if task.State != "doing" || len(task.Runs) != 1 || task.Runs[0].State != "running" {
				t.Fatalf("%s: task %v; want doing with its one run running", when, task)
			}
			if !slices.Contains(wkRunProcs(runs[id]), pids[id]) {
				t.Fatalf("%s: task %s's process %d is gone", when, id, pids[id])
			}
		}
		for _, ev := range e.events() {
			if strOf(ev.Reason) == "lease_expired" {
				t.Fatalf("%s: %v", when, ev)
			}
		}
		for _, l := range w.logLines() {
			if l["msg"] == "run.lost" {
				t.Fatalf("%s: the worker lost a run: %v", when, l)
			}
		}
	}

	waitRenewed(stepWall(t, clockFile, 2*time.Hour), 2*time.Hour)
	healthy("wall clock 2 h ahead")
	waitRenewed(stepWall(t, clockFile, -time.Hour), -time.Hour)
	healthy("wall clock 1 h behind")
	at := stepWall(t, clockFile, 0)
	healthy("wall clock set right, before the next renewals")
	waitRenewed(at, 0)
	healthy("wall clock set right")

	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		task := e.waitTask(id, "done", 30*time.Second)
		if task.Attempts != 1 || len(task.Runs) != 1 || task.Runs[0].ID != runs[id] || task.Runs[0].State != "succeeded" {
			t.Errorf("task %s ended %v; want done by its one run %s", id, task, runs[id])
		}
	}
	w.stop()
}
