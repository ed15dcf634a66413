package queue_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// liveWorkers is the ids Workers lists, and each one's runs.
func (b *runBundle) liveWorkers(t *testing.T) map[string]int {
	t.Helper()
	ws, err := b.st.Workers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, w := range ws {
		out[w.ID] = w.Runs
	}
	if live, err := b.st.AnyWorkerLive(b.ctx); err != nil || live != (len(ws) > 0) {
		t.Fatalf("AnyWorkerLive = %v, %v with %d listed", live, err, len(ws))
	}
	return out
}

func (b *runBundle) seen(t *testing.T, p queue.WorkerParams) {
	t.Helper()
	if err := b.st.WorkerSeen(b.ctx, p); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerLivenessOnTheBootClock: a worker is live until its lease TTL
// passes on the boot clock without a sign of life; a step of the wall
// clock changes nothing, a reboot ends it, a sign of life renews it and
// keeps its start time, and a worker that left is gone at once.
func TestWorkerLivenessOnTheBootClock(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	a := queue.WorkerParams{ID: "h:1", Host: "h", PID: 1, Queues: []string{"x", "y"}, Concurrency: 3, Lease: 30 * time.Second}
	c := queue.WorkerParams{ID: "h:2", Host: "h", PID: 2, Concurrency: 1, Lease: 30 * time.Second}
	b.seen(t, a)
	b.seen(t, c)
	ws, err := b.st.Workers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID != "h:1" || !slices.Equal(ws[0].Queues, []string{"x", "y"}) || ws[0].Concurrency != 3 ||
		ws[1].Queues == nil || len(ws[1].Queues) != 0 || ws[0].PID != 1 || ws[0].Host != "h" {
		t.Fatalf("Workers = %+v; want h:1 (x, y, 3) and h:2 (all queues: [])", ws)
	}
	started := ws[0].StartedAt

	b.clk.Add(2 * time.Hour)
	if got := b.liveWorkers(t); len(got) != 2 {
		t.Fatalf("wall clock stepped 2 h forward: live %v, want both", got)
	}
	bc.Add(20 * time.Second)
	b.seen(t, a) // h:1 renews; h:2 says nothing
	bc.Add(20 * time.Second)
	if got := b.liveWorkers(t); len(got) != 1 || got["h:1"] != 0 {
		t.Fatalf("40 s on the boot clock, h:2 silent: live %v, want h:1 alone", got)
	}
	ws, _ = b.st.Workers(b.ctx)
	if ws[0].StartedAt != started || ws[0].LastSeen == started {
		t.Errorf("after a renewal: started %s last seen %s; want the start kept (%s) and last seen moved", ws[0].StartedAt, ws[0].LastSeen, started)
	}
	bc.Reboot("boot-2")
	if got := b.liveWorkers(t); len(got) != 0 {
		t.Fatalf("after a reboot: live %v, want none", got)
	}
	b.seen(t, a)
	if err := b.st.WorkerLeft(b.ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.liveWorkers(t); len(got) != 0 {
		t.Fatalf("after h:1 left: live %v, want none", got)
	}
}

// TestWorkerRunsCounted: a live worker's runs are those it holds now
// (queued, running or cancelling), counted from runs; ended ones do not
// count.
func TestWorkerRunsCounted(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	b.seen(t, queue.WorkerParams{ID: "w1", Host: "h", PID: 1, Concurrency: 4, Lease: time.Minute})
	b.toRunState(t, queue.RunRunning)
	b.toRunState(t, queue.RunCancelling)
	b.toRunState(t, queue.RunSucceeded)
	if got := b.liveWorkers(t); got["w1"] != 2 {
		t.Fatalf("runs of w1: %v, want 2 (a running and a cancelling one)", got)
	}
}

// TestSweepWorkersKeepsTheRecentlyDead: the maintenance pass's sweep
// deletes only rows dead for longer than it is told.
func TestSweepWorkersKeepsTheRecentlyDead(t *testing.T) {
	t.Parallel()
	b := setupRuns(t)
	b.seen(t, queue.WorkerParams{ID: "old", Host: "h", PID: 1, Concurrency: 1, Lease: time.Minute})
	b.clk.Add(12 * time.Hour)
	b.seen(t, queue.WorkerParams{ID: "recent", Host: "h", PID: 2, Concurrency: 1, Lease: time.Minute})
	b.clk.Add(13 * time.Hour)
	n, err := b.st.SweepWorkers(b.ctx, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("SweepWorkers = %d, %v; want 1 (old, dead 25 h)", n, err)
	}
	// recent, dead 13 h, is kept: seen again, it is live once more with
	// the start time of its first row (old's, deleted, would be new).
	recentStart := queue.FormatTime(b.clk.Now().Add(-13 * time.Hour))
	b.seen(t, queue.WorkerParams{ID: "recent", Host: "h", PID: 2, Concurrency: 1, Lease: time.Minute})
	b.seen(t, queue.WorkerParams{ID: "old", Host: "h", PID: 1, Concurrency: 1, Lease: time.Minute})
	ws, err := b.st.Workers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]string{}
	for _, w := range ws {
		starts[w.ID] = w.StartedAt
	}
	now := queue.FormatTime(b.clk.Now())
	if len(ws) != 2 || starts["recent"] != recentStart || starts["old"] != now {
		t.Fatalf("started: %v; want recent %s (its row kept), old %s (its row swept, written anew)", starts, recentStart, now)
	}
}
