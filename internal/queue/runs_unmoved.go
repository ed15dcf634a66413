package queue

import (
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// The statements and lease conditions below were runs.go's and lease.go's;
// the runs operations no longer use them (they are store operations
// now: internal/store/runs.go), but files of this package not yet moved
// onto the store still do (ops.go, queues.go, read.go, workers.go,
// maintenance.go) and lease.go's older form of a lease (workers.go). Each goes when its last user here moves into the
// backend, which keeps its own copy, as internal/store/sqlite/runs*.go do.

// queueCols and scanQueue read a queueRow (maintenance.go).
const queueCols = sqlite.QueueCols

var scanQueue = sqlite.ScanQueue

// liveRuns repeats runs_live's own condition (schema.sql, migration 5),
// so that SQLite can prove the partial index holds every row the query
// wants: without it these scans read every run ever kept.
const (
	liveRuns          = `(state = 'queued' OR state = 'running' OR state = 'cancelling')`
	sqlCancellingRuns = `SELECT id FROM runs WHERE ` + liveRuns + ` AND state = 'cancelling' AND worker = ?`
	sqlQueuedTooLong  = `SELECT id FROM runs WHERE ` + liveRuns + ` AND state = 'queued' AND queue = ? AND ` + sqlStartedLate + ` LIMIT 500`
)

// The lease conditions, on a runs row, store.Lease's rules (see leaseNow):
// each takes leaseNow.args.
const (
	sqlLeaseValid = `(CASE WHEN boot_id IS NULL OR ? IS NULL THEN lease_expires_at > ?
		ELSE boot_id = ? AND lease_until_ns > ? END)`
	// sqlStartedLate holds for a queued run claimed before the instant
	// of startLateArgs: on the boot clock when it was claimed on this
	// boot, else by its wall-clock creation.
	sqlStartedLate = `(CASE WHEN boot_id = ? AND claimed_ns IS NOT NULL THEN claimed_ns < ? ELSE created_at < ? END)`
)

// args are the values sqlLeaseValid takes.
func (n leaseNow) args() []any {
	id := nullable(n.boot.ID)
	return []any{id, FormatTime(n.wall), id, int64(n.boot.Since)}
}

// startLateArgs are sqlStartedLate's values for runs claimed more than
// limit ago.
func (n leaseNow) startLateArgs(limit time.Duration) []any {
	return []any{nullable(n.boot.ID), int64(n.boot.Since - limit), FormatTime(n.wall.Add(-limit))}
}

// lease is grant as those statements bind it: the boot id and the expiry
// on its clock are nil without a boot clock.
func (n leaseNow) lease(ttl time.Duration) (wall string, bootID, until any) {
	l := n.grant(ttl)
	if l.BootID == "" {
		return l.Expires, nil, nil
	}
	return l.Expires, l.BootID, l.UntilNS
}
