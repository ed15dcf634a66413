package queue

import (
	"time"

	"github.com/cq-dev/cq/internal/clock"
)

// leaseNow is the instant at which a transaction writes and judges leases.
// A lease expires on the host's boot-time clock, never on the wall clock,
// so that a step of the wall clock, forward or back, neither expires a
// healthy lease nor stores an expiry that comes early once the clock is
// set right. Every statement that writes or judges a lease's expiry, or
// the start timeout, takes its values from here: a backend whose leases
// follow another clock (a database server's) changes this one place.
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

// The lease conditions, on a runs row. A run with a boot id is judged on
// that boot's clock, and a lease of another boot expired with it (the
// host rebooted); a run without one (claimed by a cq before the boot
// clock, or where no boot id can be read), or any run when this process
// has no boot clock, is judged by its wall-clock expiry as before. Each
// takes leaseNow.args.
const (
	sqlLeaseExpired = `(CASE WHEN boot_id IS NULL OR ? IS NULL THEN lease_expires_at < ?
		ELSE boot_id != ? OR lease_until_ns < ? END)`
	sqlLeaseValid = `(CASE WHEN boot_id IS NULL OR ? IS NULL THEN lease_expires_at > ?
		ELSE boot_id = ? AND lease_until_ns > ? END)`
	// sqlStartedLate holds for a queued run claimed before the instant
	// of startLateArgs: on the boot clock when it was claimed on this
	// boot, else by its wall-clock creation.
	sqlStartedLate = `(CASE WHEN boot_id = ? AND claimed_ns IS NOT NULL THEN claimed_ns < ? ELSE created_at < ? END)`
)

// args are the values sqlLeaseExpired and sqlLeaseValid take.
func (n leaseNow) args() []any {
	id := nullable(n.boot.ID)
	return []any{id, FormatTime(n.wall), id, int64(n.boot.Since)}
}

// startLateArgs are sqlStartedLate's values for runs claimed more than
// limit ago.
func (n leaseNow) startLateArgs(limit time.Duration) []any {
	return []any{nullable(n.boot.ID), int64(n.boot.Since - limit), FormatTime(n.wall.Add(-limit))}
}

// lease is what a claim or a renewal stores for a lease of ttl from n:
// the wall-clock equivalent of its expiry, the boot id and the expiry on
// that boot's clock (both nil without a boot clock).
func (n leaseNow) lease(ttl time.Duration) (wall string, bootID, until any) {
	wall = FormatTime(n.wall.Add(ttl))
	if n.boot.ID == "" {
		return wall, nil, nil
	}
	return wall, n.boot.ID, int64(n.boot.Since + ttl)
}

// claimedAt is the claim's reading of the boot clock (nil without one).
func (n leaseNow) claimedAt() any {
	if n.boot.ID == "" {
		return nil
	}
	return int64(n.boot.Since)
}

// expired is sqlLeaseExpired for a run as read.
func (n leaseNow) expired(r *runRow) bool {
	if r.BootID == "" || n.boot.ID == "" {
		return r.LeaseExpires != "" && r.LeaseExpires < FormatTime(n.wall)
	}
	return r.BootID != n.boot.ID || r.LeaseUntil < int64(n.boot.Since)
}
