// The tests of probe runs (runs.probe): a claim stores each run's probe
// mark, the reads of runs give it back, and the health figures of ended
// runs leave probe runs out.

package storetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// testProbeRuns: one claim of probe and other runs, mixed (the batched
// insert keeps each run's mark with its own row), stores each mark;
// RunGet and RunsLiveOnHost return it; RunEndedCounts and
// RunEndedAvgSeconds count only the runs that are not probes.
func testProbeRuns(t *testing.T, b Backend) {
	e := newEnv(t, b)
	// Claimed in this order, in one claim: probes at both ends and in
	// the middle, so that a mark taken from another row shows.
	order := []struct {
		id    string
		probe bool
	}{{"p1", true}, {"n1", false}, {"p2", true}, {"n2", false}, {"n3", false}, {"p3", true}}
	e.write(func(tx store.Tx) error {
		c := store.Claim{At: at(1), Worker: "w", Host: "h", Lease: wallLease(at(60)), ClaimedNS: 1}
		for _, o := range order {
			if err := enqueue(tx, store.Task{ID: o.id}, at(0)); err != nil {
				return err
			}
			c.Runs = append(c.Runs, store.ClaimRun{TaskID: o.id, RunID: "run-" + o.id, Token: "tok-" + o.id, Queue: "q",
				Attempt: 1, Probe: o.probe})
		}
		return tx.ClaimTasks(ctx, c)
	})
	for _, o := range order {
		if r := e.run("run-" + o.id); r.Probe != o.probe {
			t.Errorf("RunGet(run-%s).Probe = %v, want %v", o.id, r.Probe, o.probe)
		}
	}
	live, err := e.s.RunsLiveOnHost(ctx, "h")
	if err != nil || len(live) != len(order) {
		t.Fatalf("RunsLiveOnHost(h) = %d runs, %v", len(live), err)
	}
	for _, lr := range live {
		if want := lr.TaskID[0] == 'p'; lr.Probe != want {
			t.Errorf("RunsLiveOnHost: %s Probe = %v, want %v", lr.ID, lr.Probe, want)
		}
	}
	// Every run starts at 2 and ends: the runs that are not probes one
	// succeeded (3 s), one failed (6 s), one timed out (9 s); the probes
	// failed, timed out and succeeded, each after 100 s, so that an
	// average that counted them would show.
	ends := map[string]struct {
		state string
		at    int
	}{
		"n1": {"succeeded", 5}, "n2": {"failed", 8}, "n3": {"timeout", 11},
		"p1": {"failed", 102}, "p2": {"timeout", 102}, "p3": {"succeeded", 102},
	}
	e.write(func(tx store.Tx) error {
		for _, o := range order {
			if task, err := tx.RunStart(ctx, store.RunStart{RunID: "run-" + o.id, Token: "tok-" + o.id, At: at(2)}); task != o.id || err != nil {
				return fmt.Errorf("start run-%s: %q, %w", o.id, task, err)
			}
			end := ends[o.id]
			ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-" + o.id, From: "running", To: end.state, Token: "tok-" + o.id,
				Set: store.SetRunEndedAt, EndedAt: at(end.at)})
			if !ok || err != nil {
				return fmt.Errorf("end run-%s: %v, %w", o.id, ok, err)
			}
		}
		return nil
	})
	// The mark stays with the ended run.
	for _, o := range order {
		if r := e.run("run-" + o.id); r.Probe != o.probe || r.State != ends[o.id].state {
			t.Errorf("ended run-%s: Probe %v, state %s; want %v, %s", o.id, r.Probe, r.State, o.probe, ends[o.id].state)
		}
	}
	ended := map[string]int{}
	if err := e.s.RunEndedCounts(ctx, at(0), func(st string, n int) { ended[st] = n }); err != nil ||
		fmt.Sprint(ended) != "map[failed:1 succeeded:1 timeout:1]" {
		t.Errorf("RunEndedCounts = %v, %v; want one of each, the probes left out", ended, err)
	}
	if avg, ok, err := e.s.RunEndedAvgSeconds(ctx, at(0)); !ok || err != nil || math.Abs(avg-6) > 0.01 {
		t.Errorf("RunEndedAvgSeconds = %v, %v, %v; want 6 (runs of 3, 6 and 9 s, the probes left out)", avg, ok, err)
	}
	// Only probes ended in the window: nothing to count.
	ended = map[string]int{}
	if err := e.s.RunEndedCounts(ctx, at(50), func(st string, n int) { ended[st] = n }); err != nil || len(ended) != 0 {
		t.Errorf("RunEndedCounts of probes only = %v, %v; want none", ended, err)
	}
	if avg, ok, err := e.s.RunEndedAvgSeconds(ctx, at(50)); ok || err != nil {
		t.Errorf("RunEndedAvgSeconds of probes only = %v, %v, %v; want none", avg, ok, err)
	}
}
