package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cq-dev/cq/internal/store"
)

// The statements of store.RunReader and store.RunWriter: this file holds
// the reads of one run and the run CAS; runs_claim.go, runs_start.go,
// runs_finish.go, runs_lease.go and runs_complete.go the rest, in the
// order of a run's life.

// RunCols are the columns ScanRun reads.
const RunCols = `id, task_id, state, queue, COALESCE(lease_token,''), COALESCE(host,''),
	COALESCE(lease_expires_at,''), created_at, COALESCE(started_at,''), attempt, COALESCE(pgid,0),
	COALESCE(boot_id,''), COALESCE(lease_until_ns,0), probe`

// ScanRun reads RunCols into r, then more.
func ScanRun(sc interface{ Scan(...any) error }, r *store.Run, more ...any) error {
	return sc.Scan(append([]any{&r.ID, &r.TaskID, &r.State, &r.Queue, &r.Token, &r.Host, &r.LeaseExpires, &r.Created, &r.Started,
		&r.Attempt, &r.Pgid, &r.BootID, &r.LeaseUntil, &r.Probe}, more...)...)
}

// runsLive is the condition of the partial index runs_live (migrations/0005_state_checks_as_ors.sql), word for word: a query on live runs that repeats it lets
// SQLite prove the index holds every row it wants; without it such a scan
// reads every run ever kept.
const runsLive = `(state = 'queued' OR state = 'running' OR state = 'cancelling')`

const (
	sqlRunGet            = `SELECT ` + RunCols + ` FROM runs WHERE id = ?`
	sqlRunState          = `SELECT state FROM runs WHERE id = ?`
	sqlLiveRunsOnHost    = `SELECT ` + RunCols + `, COALESCE(worker,'') FROM runs WHERE ` + runsLive + ` AND host = ?`
	sqlRunUpdateSetHead  = `UPDATE runs SET state = ?, reason = COALESCE(?, reason)`
	sqlRunUpdateSetEnded = `, ended_at = ?`
	sqlRunUpdateSetExit  = `, exit_code = ?, signal = ?, error = ?`
)

func (r reads) RunGet(ctx context.Context, id string) (*store.Run, error) {
	var run store.Run
	err := ScanRun(r.q.QueryRowContext(ctx, sqlRunGet, id), &run)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &run, nil
}

func (r reads) RunState(ctx context.Context, id string) (string, error) {
	var st string
	err := r.q.QueryRowContext(ctx, sqlRunState, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return st, err
}

func (r reads) RunsLiveOnHost(ctx context.Context, host string) ([]store.LiveRun, error) {
	rows, err := r.q.QueryContext(ctx, sqlLiveRunsOnHost, host)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LiveRun
	for rows.Next() {
		var lr store.LiveRun
		if err := ScanRun(rows, &lr.Run, &lr.Worker); err != nil {
			return nil, err
		}
		out = append(out, lr)
	}
	return out, rows.Err()
}

// runUpdateSQL holds the statement for each set of fields and guards a
// RunUpdate has, built on first use: index runUpdateSlot.
var runUpdateSQL [int(store.RunFieldsAll+1) * 4]atomic.Pointer[string]

func runUpdateSlot(u *store.RunUpdate) int {
	i := int(u.Set&store.RunFieldsAll) * 4
	if u.Token != "" {
		i += 2
	}
	if u.ExpiredAt != nil {
		i++
	}
	return i
}

func (t *Tx) RunUpdate(ctx context.Context, u store.RunUpdate) (bool, error) {
	slot := &runUpdateSQL[runUpdateSlot(&u)]
	q := slot.Load()
	if q == nil {
		s := runUpdateText(u.Set, u.Token != "", u.ExpiredAt != nil)
		slot.Store(&s)
		q = &s
	}
	args := make([]any, 0, 13)
	args = append(args, u.To, nullable(u.Reason))
	if u.Set&store.SetRunEndedAt != 0 {
		args = append(args, nullable(u.EndedAt))
	}
	if u.Set&store.SetRunExit != 0 {
		var exit any
		if u.ExitCode != nil {
			exit = *u.ExitCode
		}
		args = append(args, exit, nullable(u.Signal), nullable(u.Error))
	}
	args = append(args, u.ID, u.From)
	if u.Token != "" {
		args = append(args, u.Token)
	}
	if u.ExpiredAt != nil {
		args = append(args, leaseCondArgs(*u.ExpiredAt)...)
	}
	res, err := t.ExecContext(ctx, *q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// runUpdateText is the UPDATE for the fields f and the guards a
// RunUpdate asks for, its placeholders in RunUpdate's order.
func runUpdateText(f store.RunFields, token, expired bool) string {
	q := sqlRunUpdateSetHead
	if f&store.SetRunEndedAt != 0 {
		q += sqlRunUpdateSetEnded
	}
	if f&store.SetRunExit != 0 {
		q += sqlRunUpdateSetExit
	}
	q += ` WHERE id = ? AND state = ?`
	if token {
		q += ` AND lease_token = ?`
	}
	if expired {
		q += ` AND ` + leaseExpiredCond
	}
	return q
}

// maxChunk bounds the rows one batched statement writes.
const maxChunk = 128

// inChunks calls fn for consecutive ranges [lo, hi) of n rows whose sizes
// are powers of two, at most maxChunk, largest first: each batched
// statement then comes in at most 8 sizes, each prepared once and kept
// in the write connection's statement cache, whatever n is, and never
// binds more values than SQLite allows.
func inChunks(n int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		size := maxChunk
		for size > n-lo {
			size /= 2
		}
		if err := fn(lo, lo+size); err != nil {
			return err
		}
		lo += size
	}
	return nil
}

// sqlByCount caches a statement's text per count of rows.
type sqlByCount struct {
	mu    sync.Mutex
	build func(int) string
	texts map[int]string
}

func newSQLByCount(build func(int) string) *sqlByCount {
	return &sqlByCount{build: build, texts: map[int]string{}}
}

func (s *sqlByCount) get(k int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.texts[k]
	if !ok {
		q = s.build(k)
		s.texts[k] = q
	}
	return q
}

// qualified prefixes each of the comma-separated columns with table.
func qualified(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
