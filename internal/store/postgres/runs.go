package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The statements of store.RunReader and store.RunWriter: this file holds
// the reads of one run and the run CAS; runs_claim.go, runs_start.go,
// runs_finish.go, runs_lease.go and runs_complete.go the rest, in the
// order of a run's life.

// runCols are the columns scanRun reads.
const runCols = `id, task_id, state, queue, COALESCE(lease_token,''), COALESCE(host,''),
	COALESCE(lease_expires_at,''), created_at, COALESCE(started_at,''), attempt, COALESCE(pgid,0),
	COALESCE(boot_id,''), COALESCE(lease_until_ns,0), probe`

// scanRun reads runCols into r, then more.
func scanRun(sc pgx.Row, r *store.Run, more ...any) error {
	return sc.Scan(append([]any{&r.ID, &r.TaskID, &r.State, &r.Queue, &r.Token, &r.Host, &r.LeaseExpires, &r.Created, &r.Started,
		&r.Attempt, &r.Pgid, &r.BootID, &r.LeaseUntil, &r.Probe}, more...)...)
}

// runsLive is the condition of the partial index runs_live, word for word,
// so that the planner sees the index holds every row a query wants.
const runsLive = `state IN ('queued','running','cancelling')`

func (r *reads) RunGet(ctx context.Context, id string) (*store.Run, error) {
	var run store.Run
	err := scanRun(r.q.QueryRow(r.cx(ctx), `SELECT `+runCols+` FROM runs WHERE id = $1`, id), &run)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &run, nil
}

func (r *reads) RunState(ctx context.Context, id string) (string, error) {
	var st string
	err := r.q.QueryRow(r.cx(ctx), `SELECT state FROM runs WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return st, err
}

func (r *reads) RunsLiveOnHost(ctx context.Context, host string) ([]store.LiveRun, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+runCols+`, COALESCE(worker,'') FROM runs WHERE `+runsLive+` AND host = $1`, host)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LiveRun
	for rows.Next() {
		var lr store.LiveRun
		if err := scanRun(rows, &lr.Run, &lr.Worker); err != nil {
			return nil, err
		}
		out = append(out, lr)
	}
	return out, rows.Err()
}

// runUpdateSQL holds the statement for each set of fields and guards a
// RunUpdate has, built on first use: index runUpdateSlot.
var runUpdateSQL [int(store.RunFieldsAll+1) * 2 * 3]atomic.Pointer[string]

// runUpdateSlot is u's place in runUpdateSQL: its fields, whether it
// fences on a token, and its expiry guard (none, on the wall clock, on
// the boot clock).
func runUpdateSlot(u *store.RunUpdate) int {
	i := int(u.Set&store.RunFieldsAll) * 6
	if u.Token != "" {
		i += 3
	}
	return i + int(guardOf(u.ExpiredAt))
}

func (tx *Tx) RunUpdate(ctx context.Context, u store.RunUpdate) (bool, error) {
	slot := &runUpdateSQL[runUpdateSlot(&u)]
	q := slot.Load()
	if q == nil {
		s := runUpdateText(u.Set, u.Token != "", guardOf(u.ExpiredAt))
		slot.Store(&s)
		q = &s
	}
	args := make([]any, 0, 12)
	args = append(args, u.To, nullable(u.Reason))
	if u.Set&store.SetRunEndedAt != 0 {
		args = append(args, nullable(u.EndedAt))
	}
	if u.Set&store.SetRunExit != 0 {
		var exit any
		if u.ExitCode != nil {
			exit = int32(*u.ExitCode)
		}
		args = append(args, exit, nullable(u.Signal), nullable(u.Error))
	}
	args = append(args, u.ID, u.From)
	if u.Token != "" {
		args = append(args, u.Token)
	}
	if u.ExpiredAt != nil {
		args = append(args, leaseArgs(*u.ExpiredAt)...)
	}
	tag, err := tx.ptx.Exec(tx.ctx, *q, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// runUpdateText is the UPDATE for the fields f and the guards a RunUpdate
// asks for, its parameters in RunUpdate's order.
func runUpdateText(f store.RunFields, token bool, g leaseGuard) string {
	n := 0
	p := func() string { n++; return "$" + strconv.Itoa(n) }
	q := `UPDATE runs SET state = ` + p() + `, reason = COALESCE(` + p() + `, reason)`
	if f&store.SetRunEndedAt != 0 {
		q += `, ended_at = ` + p()
	}
	if f&store.SetRunExit != 0 {
		q += `, exit_code = ` + p() + `, signal = ` + p() + `, error = ` + p()
	}
	q += ` WHERE id = ` + p() + ` AND state = ` + p()
	if token {
		q += ` AND lease_token = ` + p()
	}
	if g != guardNone {
		q += ` AND ` + leaseCond(true, g, n+1)
	}
	return q
}
