package sqlite

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

// The lease conditions on a runs row, the rules of store.Lease: a run
// with a boot id is judged on that boot's clock, and a lease of another
// boot expired with it (the host rebooted); a run without one, or any run
// when the transaction has no boot clock (? IS NULL), by its wall-clock
// expiry. Each takes leaseCondArgs.
const (
	leaseExpiredCond = `(CASE WHEN boot_id IS NULL OR ? IS NULL THEN lease_expires_at < ?
		ELSE boot_id != ? OR lease_until_ns < ? END)`
	leaseValidCond = `(CASE WHEN boot_id IS NULL OR ? IS NULL THEN lease_expires_at > ?
		ELSE boot_id = ? AND lease_until_ns > ? END)`
)

// leaseCondArgs are the values leaseExpiredCond and leaseValidCond take at c.
func leaseCondArgs(c store.LeaseClock) []any {
	id := nullable(c.BootID)
	return []any{id, c.Wall, id, c.BootNS}
}

// leaseValues are the boot id and boot-clock expiry columns of l, NULL
// without a boot id, and v with it (the reading claimed_ns stores).
func leaseValues(l store.Lease, v int64) (bootID, until, at any) {
	if l.BootID == "" {
		return nil, nil, nil
	}
	return l.BootID, l.UntilNS, v
}

const (
	// sqlExpiredLeases reads runs_live (its condition repeated).
	sqlExpiredLeases = `SELECT id FROM runs WHERE ` + runsLive + ` AND ` + leaseExpiredCond + ` LIMIT 500`
	// sqlRenewLease renews a lease on the boot clock: a renewal by a cq
	// that has none (no boot id) leaves the run to be judged on the wall
	// clock.
	sqlRenewLease = `UPDATE runs SET lease_expires_at = ?, boot_id = ?, lease_until_ns = ?
	WHERE id = ? AND lease_token = ? AND ` + runsLive + ` AND ` + leaseValidCond + `
	RETURNING state`
)

func (r reads) RunsLeaseExpired(ctx context.Context, now store.LeaseClock) ([]string, error) {
	return queryStrings(ctx, r.q, sqlExpiredLeases, leaseCondArgs(now)...)
}

func (t *Tx) RunLeaseRenew(ctx context.Context, id, token string, l store.Lease, now store.LeaseClock) (string, error) {
	bootID, until, _ := leaseValues(l, 0)
	args := append([]any{l.Expires, bootID, until, id, token}, leaseCondArgs(now)...)
	rows, err := t.QueryContext(ctx, sqlRenewLease, args...)
	if err != nil {
		return "", err
	}
	// Drain RETURNING to the end: a statement left un-stepped keeps
	// SQLite from checkpointing the WAL.
	var state string
	for rows.Next() {
		if err := rows.Scan(&state); err != nil {
			rows.Close()
			return "", err
		}
	}
	rows.Close()
	return state, rows.Err()
}
