package queue_test

import (
	"sync"
	"testing"
	"time"

	cqclock "github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// bootClock is a settable boot-time clock for Store.Boot, apart from the
// store's wall clock, so that a test can step one and not the other.
type bootClock struct {
	mu sync.Mutex
	b  cqclock.BootTime
}

func (c *bootClock) Boot() cqclock.BootTime { c.mu.Lock(); defer c.mu.Unlock(); return c.b }
func (c *bootClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.Since += d
}

// Reboot starts the clock again near zero under a new boot id.
func (c *bootClock) Reboot(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = cqclock.BootTime{ID: id, Since: time.Minute}
}

// setupLeases is setupRuns with a boot clock of its own (3 days after
// boot), which the wall clock no longer moves.
func setupLeases(t *testing.T) (*runBundle, *bootClock) {
	t.Helper()
	b := setupRuns(t)
	bc := &bootClock{b: cqclock.BootTime{ID: "boot-1", Since: 72 * time.Hour}}
	b.st.Boot = bc.Boot
	return b, bc
}

func (b *runBundle) reap(t *testing.T) []string {
	t.Helper()
	reaped, err := b.st.ReapExpired(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range reaped {
		ids = append(ids, r.RunID)
	}
	return ids
}

// TestWallClockStepsDoNotExpireLeases: a step of the wall clock, forward
// or back, neither expires a lease nor refuses its renewal, and renewals
// made while the clock is wrong hold once it is set right.
func TestWallClockStepsDoNotExpireLeases(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	c := b.toRunState(t, queue.RunRunning)
	b.clk.Add(2 * time.Hour)
	if got := b.reap(t); len(got) != 0 {
		t.Fatalf("wall clock stepped 2 h forward: reaped %v, want none", got)
	}
	bc.Add(30 * time.Second)
	if _, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, 90*time.Second); err != nil {
		t.Fatalf("renewal after the wall clock stepped forward: %v", err)
	}
	b.clk.Add(-3 * time.Hour) // an hour before the claim
	bc.Add(30 * time.Second)
	if _, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, 90*time.Second); err != nil {
		t.Fatalf("renewal after the wall clock stepped back: %v", err)
	}
	b.clk.Add(time.Hour) // set right
	bc.Add(30 * time.Second)
	if got := b.reap(t); len(got) != 0 {
		t.Fatalf("wall clock set right after a renewal an hour early: reaped %v, want none", got)
	}
	if got := b.runState(t, c.RunID); got != queue.RunRunning {
		t.Fatalf("run is %s, want running", got)
	}
}

// TestLeaseOfAnotherBootIsExpired: after a reboot (another boot id, its
// clock started again near zero) every lease of the boot before is
// expired at the next reap, however far its expiry is on the new clock,
// and can no longer be renewed.
func TestLeaseOfAnotherBootIsExpired(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	c := b.toRunState(t, queue.RunRunning)
	bc.Reboot("boot-2")
	b.clk.Add(time.Minute)
	if _, err := b.st.RenewLease(b.ctx, c.RunID, c.Token, 90*time.Second); !queue.IsConflict(err) {
		t.Fatalf("renewal of a lease of the boot before: %v, want a conflict", err)
	}
	if got := b.reap(t); len(got) != 1 || got[0] != c.RunID {
		t.Fatalf("reaped %v after a reboot, want [%s]", got, c.RunID)
	}
	if got := b.runState(t, c.RunID); got != queue.RunFailed {
		t.Fatalf("run is %s, want failed", got)
	}
}

// TestLeaseExpiresOnTheBootClock: a lease whose expiry passed on the
// boot clock is reaped although the wall clock says it is young (a step
// back, or a host suspended), and not a moment before.
func TestLeaseExpiresOnTheBootClock(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	c := b.toRunState(t, queue.RunRunning)
	b.clk.Add(-time.Hour)
	bc.Add(90 * time.Second)
	if got := b.reap(t); len(got) != 0 {
		t.Fatalf("reaped %v at exactly the lease's expiry, want none", got)
	}
	bc.Add(time.Millisecond)
	if got := b.reap(t); len(got) != 1 || got[0] != c.RunID {
		t.Fatalf("reaped %v once the boot clock passed the expiry, want [%s]", got, c.RunID)
	}
}

// TestStartTimeoutOnTheBootClock: a claimed run's start timeout counts on
// the boot clock: a step of the wall clock past it times nothing out,
// the boot clock passing it does.
func TestStartTimeoutOnTheBootClock(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	c := b.toRunState(t, queue.RunQueued) // default queue: 10 min
	b.clk.Add(2 * time.Hour)
	if n, err := b.st.TimeoutQueuedRuns(b.ctx); err != nil || n != 0 {
		t.Fatalf("wall clock 2 h forward: %d timed out, %v; want none", n, err)
	}
	b.clk.Add(-2 * time.Hour)
	bc.Add(10*time.Minute + time.Millisecond)
	if n, err := b.st.TimeoutQueuedRuns(b.ctx); err != nil || n != 1 {
		t.Fatalf("boot clock past the start timeout: %d timed out, %v; want 1", n, err)
	}
	if got := b.runState(t, c.RunID); got != queue.RunTimeout {
		t.Fatalf("run is %s, want timeout", got)
	}
}

// TestLeaseWithoutBootID: a run claimed by a cq from before the boot
// clock (no boot id) keeps its wall-clock expiry: reaped once the wall
// clock passes it, not before; a renewal moves it to the boot clock.
func TestLeaseWithoutBootID(t *testing.T) {
	t.Parallel()
	b, bc := setupLeases(t)
	old := b.toRunState(t, queue.RunRunning)
	renewed := b.toRunState(t, queue.RunRunning)
	if _, err := sqlite.DBOf(b.st.Backend()).SQL.Exec(`UPDATE runs SET boot_id = NULL, claimed_ns = NULL, lease_until_ns = NULL`); err != nil {
		t.Fatal(err)
	}
	bc.Add(time.Hour)
	if got := b.reap(t); len(got) != 0 {
		t.Fatalf("reaped %v before their wall-clock expiry, want none", got)
	}
	if _, err := b.st.RenewLease(b.ctx, renewed.RunID, renewed.Token, 90*time.Second); err != nil {
		t.Fatalf("renewal of a lease without a boot id: %v", err)
	}
	b.clk.Add(91 * time.Second)
	if got := b.reap(t); len(got) != 1 || got[0] != old.RunID {
		t.Fatalf("wall clock past the expiry: reaped %v, want only [%s] (the other renewed on the boot clock)", got, old.RunID)
	}
	bc.Add(91 * time.Second)
	if got := b.reap(t); len(got) != 1 || got[0] != renewed.RunID {
		t.Fatalf("boot clock past the renewed lease: reaped %v, want [%s]", got, renewed.RunID)
	}
}
