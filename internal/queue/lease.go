package queue

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/store"
)

// leaseNow is the instant at which a transaction writes and judges leases.
// A lease expires on the host's boot-time clock, never on the wall clock,
// so that a step of the wall clock, forward or back, neither expires a
// healthy lease nor stores an expiry that comes early once the clock is
// set right. Every operation that writes or judges a lease's expiry, or
// the start timeout, takes its values from here (the rules the store
// applies to them are store.Lease's): a backend whose leases follow
// another clock (a database server's) changes this one place.
type leaseNow struct {
	wall time.Time      // the transaction's wall time
	boot clock.BootTime // ID "": no boot clock, leases fall back to wall
}

// leaseNow reads the boot clock for a transaction whose wall time is wall.
func (s *Store) leaseNow(wall time.Time) leaseNow {
	n := leaseNow{wall: wall}
	if s.Boot != nil {
		n.boot = s.Boot()
	}
	return n
}

// clock is n as the store judges leases at it.
func (n leaseNow) clock() store.LeaseClock {
	return store.LeaseClock{Wall: FormatTime(n.wall), BootID: n.boot.ID, BootNS: int64(n.boot.Since)}
}

// grant is what a claim or a renewal stores for a lease of ttl from n:
// the wall-clock equivalent of its expiry, and the boot id and the expiry
// on that boot's clock (none without a boot clock).
func (n leaseNow) grant(ttl time.Duration) store.Lease {
	l := store.Lease{Expires: FormatTime(n.wall.Add(ttl))}
	if n.boot.ID != "" {
		l.BootID, l.UntilNS = n.boot.ID, int64(n.boot.Since+ttl)
	}
	return l
}

// before is the instant limit before n, for the start timeout: a run
// claimed before it has waited longer than limit for its start.
func (n leaseNow) before(limit time.Duration) store.LeaseClock {
	return store.LeaseClock{Wall: FormatTime(n.wall.Add(-limit)), BootID: n.boot.ID, BootNS: int64(n.boot.Since - limit)}
}

// claimedAt is the claim's reading of the boot clock (the store keeps it
// only with a boot id).
func (n leaseNow) claimedAt() int64 { return int64(n.boot.Since) }

// expired is store.Lease's rule of expiry for a run as read.
func (n leaseNow) expired(r *runRow) bool {
	if r.BootID == "" || n.boot.ID == "" {
		return r.LeaseExpires != "" && r.LeaseExpires < FormatTime(n.wall)
	}
	return r.BootID != n.boot.ID || r.LeaseUntil < int64(n.boot.Since)
}

// Renewal is what a lease renewal learns.
type Renewal struct {
	State   string // the run's state now: a worker sees cancelling here
	Expires time.Time
}

// RenewLease extends a live run's lease by ttl from now, by
// compare-and-expire: the token must match and the lease must not have
// expired. A refusal means the worker has lost the run.
func (s *Store) RenewLease(ctx context.Context, runID, token string, ttl time.Duration) (Renewal, error) {
	var out Renewal
	// s.st.Write: see ClaimN.
	err := s.st.Write(ctx, func(tx store.Tx) error {
		now := s.now()
		ln := s.leaseNow(now)
		st, err := tx.RunLeaseRenew(ctx, runID, token, ln.grant(ttl), ln.clock())
		if err != nil {
			return err
		}
		if st == "" {
			return fenced(runID)
		}
		out = Renewal{State: st, Expires: now.Add(ttl)}
		return nil
	})
	return out, err
}
