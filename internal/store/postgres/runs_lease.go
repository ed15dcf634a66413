package postgres

import (
	"context"
	"errors"
	"strconv"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// leaseGuard is how a lease is judged at a LeaseClock (store.Lease's
// rules): not at all, on the wall clock alone (the clock has no boot id),
// or on the boot clock for a run that has a boot id.
type leaseGuard uint8

const (
	guardNone leaseGuard = iota
	guardWall
	guardBoot
)

func guardOf(c *store.LeaseClock) leaseGuard {
	switch {
	case c == nil:
		return guardNone
	case c.BootID == "":
		return guardWall
	}
	return guardBoot
}

// leaseCond is the condition that a runs row's lease has expired
// (expired) or is valid at a clock judged by g, its parameters numbered
// from first on: leaseArgs's values. A run with no lease (NULL expiry)
// is neither.
func leaseCond(expired bool, g leaseGuard, first int) string {
	p := func(i int) string { return "$" + strconv.Itoa(first+i) }
	wall, boot := `lease_expires_at > `+p(0), `boot_id = `+p(1)+` AND lease_until_ns > `+p(2)
	if expired {
		wall, boot = `lease_expires_at < `+p(0), `(boot_id <> `+p(1)+` OR lease_until_ns < `+p(2)+`)`
	}
	if g == guardWall {
		return `(` + wall + `)`
	}
	return `(CASE WHEN boot_id IS NULL THEN ` + wall + ` ELSE ` + boot + ` END)`
}

// leaseArgs are the values leaseCond takes at c.
func leaseArgs(c store.LeaseClock) []any {
	if c.BootID == "" {
		return []any{c.Wall}
	}
	return []any{c.Wall, c.BootID, c.BootNS}
}

// leaseValues are the boot id and boot-clock expiry columns of l, NULL
// without a boot id, and v with it (the reading claimed_ns stores).
func leaseValues(l store.Lease, v int64) (bootID, until, at any) {
	if l.BootID == "" {
		return nil, nil, nil
	}
	return l.BootID, l.UntilNS, v
}

func (r *reads) RunsLeaseExpired(ctx context.Context, now store.LeaseClock) ([]string, error) {
	return queryStrings(r.cx(ctx), r.q, `SELECT id FROM runs WHERE `+runsLive+` AND `+leaseCond(true, guardOf(&now), 1)+` LIMIT 500`,
		leaseArgs(now)...)
}

// RunLeaseRenew renews a lease on the boot clock: a renewal by a cq that
// has none (no boot id) leaves the run to be judged on the wall clock.
func (tx *Tx) RunLeaseRenew(ctx context.Context, id, token string, l store.Lease, now store.LeaseClock) (string, error) {
	bootID, until, _ := leaseValues(l, 0)
	args := append([]any{l.Expires, bootID, until, id, token}, leaseArgs(now)...)
	var state string
	err := tx.ptx.QueryRow(tx.ctx, `UPDATE runs SET lease_expires_at = $1, boot_id = $2, lease_until_ns = $3
		WHERE id = $4 AND lease_token = $5 AND `+runsLive+` AND `+leaseCond(false, guardOf(&now), 6)+`
		RETURNING state`, args...).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return state, err
}
