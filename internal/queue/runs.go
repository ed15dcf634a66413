package queue

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Failure classes decide which retry budget a failed run spends
// (docs/semantics.md, Retries and backoff).
const (
	ClassOther     = "other"     // non-zero exit, killed by a signal
	ClassTransient = "transient" // exit 75, spawn error, lost worker, start timeout
	ClassTimeout   = "timeout"   // the run exceeded its time limit
	ClassNone      = "none"      // never retried: missing handler
)

// ExitTempFail is EX_TEMPFAIL: a command exiting with it failed transiently.
const ExitTempFail = 75

// ClaimParams says who claims and from where.
type ClaimParams struct {
	Worker string
	Host   string
	Queues []string // empty: all
	Lease  time.Duration
}

// Claimed is a task a worker now owns through a run and its lease.
type Claimed struct {
	TaskID       string
	RunID        string
	Token        string
	Attempt      int
	Queue        string
	Spec         Spec
	LeaseExpires time.Time
	// Timeout is the run time limit: the task's, else its queue's; 0 = none.
	Timeout time.Duration
}

// queueRow is a queues row's settings.
type queueRow = store.Queue

// queueCols and scanQueue read a queueRow in the statements not yet moved
// into the backend.
const queueCols = sqlite.QueueCols

var scanQueue = sqlite.ScanQueue

func getQueue(ctx context.Context, q store.Reader, name string) (*queueRow, error) {
	row, err := q.QueueGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		// A queue always has a row once a task names it; defaults otherwise.
		return &queueRow{Name: name, Retries: 0, BackoffMS: 30000, TransientRetries: 3, TimeoutRetries: 1,
			StartTimeoutMS: 600000, WarnAfterMS: 600000}, nil
	}
	return row, err
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Claim takes the next runnable task (highest priority, then oldest) from
// a queue that is not paused and below its concurrency, counted across all
// workers, that is the head of its key lane. It moves the task todo →
// doing and creates its run (queued) with a lease, in one transaction. It
// returns nil when nothing is runnable.
//
// The claim reads only the tasks_claim index (runnable lane heads, per
// queue), so its cost does not grow with tasks waiting behind busy lanes
// or in paused queues.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (*Claimed, error) {
	cs, err := s.ClaimN(ctx, p, 1)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return cs[0], nil
}

// ClaimN claims up to n tasks, as Claim does, in one transaction.
func (s *Store) ClaimN(ctx context.Context, p ClaimParams, n int) ([]*Claimed, error) {
	var out []*Claimed
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		var err error
		out, err = claimTx(ctx, tx, s.leaseNow(now), p, n)
		return err
	})
	return out, err
}

// claimTx claims up to n tasks inside tx.
//
// The claimable queues and their live-run counts are read once, then each
// queue's next runnable tasks, up to n and its room, in one read of the
// claim index: a claim does not move a lane (its next task becomes the
// head only once the claimed one ends), so a queue's first k heads are
// its next k claims. The queues' lists merge by priority, then seq, and
// the first n are claimed with one statement for their tasks and one for
// their runs.
func claimTx(ctx context.Context, tx *sqlite.Tx, ln leaseNow, p ClaimParams, n int) ([]*Claimed, error) {
	if p.Lease <= 0 {
		p.Lease = 90 * time.Second
	}
	if n <= 0 {
		return nil, nil
	}
	qs, err := claimableQueues(ctx, tx, p.Queues)
	if err != nil {
		return nil, err
	}
	var heads []claimHeadRow
	for _, q := range qs {
		want := n
		if q.room >= 0 {
			want = min(want, q.room)
		}
		if heads, err = claimHeads(ctx, tx, q.row, want, heads); err != nil {
			return nil, err
		}
	}
	if len(qs) > 1 {
		slices.SortStableFunc(heads, func(a, b claimHeadRow) int {
			if a.t.Priority != b.t.Priority {
				return cmp.Compare(a.t.Priority, b.t.Priority)
			}
			return cmp.Compare(a.t.Seq, b.t.Seq)
		})
	}
	if len(heads) > n {
		heads = heads[:n]
	}
	if len(heads) == 0 {
		return nil, nil
	}
	return claimAll(ctx, tx, ln, p, heads)
}

// claimHeadRow is a task a claim may take, and its queue's settings.
type claimHeadRow struct {
	t *taskRow
	q *queueRow
}

// sqlClaimHeads reads a queue's next runnable tasks in claim order, with
// only the columns a claim uses (each column the query returns costs it
// time). The queue is bound as CAST(? AS TEXT), for the reason given at
// sqlAdvanceLane: with a bare ? the statement was prepared again on every
// claim, which cost several times what running it does.
const sqlClaimHeads = `SELECT id, priority, COALESCE(seq,0), attempts, spec FROM tasks INDEXED BY tasks_claim
	WHERE queue = CAST(? AS TEXT) AND state = 'todo' AND lane_head = 1 ORDER BY priority, seq LIMIT `

// claimHeads appends up to limit of queue q's next runnable tasks to out.
func claimHeads(ctx context.Context, tx *sqlite.Tx, q *queueRow, limit int, out []claimHeadRow) ([]claimHeadRow, error) {
	if limit <= 0 {
		return out, nil
	}
	// The limit is written in the statement (bound as a parameter it cost
	// the claim about a tenth more), rounded up to a power of two so that
	// there are few statements to prepare.
	text := 1
	for text < limit {
		text *= 2
	}
	rows, err := tx.QueryContext(ctx, claimHeadsSQL.get(text), q.Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for n := 0; n < limit && rows.Next(); n++ {
		t := taskRow{State: TaskTodo, Queue: q.Name}
		if err := rows.Scan(&t.ID, &t.Priority, &t.Seq, &t.Attempts, &t.Spec); err != nil {
			return nil, err
		}
		out = append(out, claimHeadRow{t: &t, q: q})
	}
	return out, rows.Err()
}

// claimAll claims heads: each task todo → doing, and its run, queued.
// One UPDATE moves every task (a CAS on each: all must still be todo,
// which they are, read in this transaction); one INSERT writes the runs.
func claimAll(ctx context.Context, tx *sqlite.Tx, ln leaseNow, p ClaimParams, heads []claimHeadRow) ([]*Claimed, error) {
	now := ln.wall
	at := FormatTime(now)
	err := inChunks(len(heads), func(lo, hi int) error {
		args := make([]any, 0, 2+hi-lo)
		args = append(args, TaskDoing, at)
		for _, h := range heads[lo:hi] {
			args = append(args, h.t.ID)
		}
		res, err := tx.ExecMany(ctx, claimTasksSQL.get(hi-lo), args...)
		if err != nil {
			return err
		}
		if got, _ := res.RowsAffected(); got != int64(hi-lo) {
			return fmt.Errorf("claim: %d of %d tasks were still todo", got, hi-lo)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Claimed, len(heads))
	lease, bootID, until := ln.lease(p.Lease)
	claimed := ln.claimedAt()
	worker, host := nullable(p.Worker), nullable(p.Host)
	// run.queued's data, {"attempt":N,"worker":W} as json.Marshal writes
	// a map (keys sorted), encoded here once for every claim.
	w, err := json.Marshal(p.Worker)
	if err != nil {
		return nil, err
	}
	for i, h := range heads {
		best := h.t
		attempt := best.Attempts + 1
		c := &Claimed{TaskID: best.ID, RunID: NewID(now), Token: newToken(), Attempt: attempt, Queue: best.Queue,
			LeaseExpires: now.Add(p.Lease)}
		_ = json.Unmarshal([]byte(best.Spec), &c.Spec)
		c.Spec.ID = best.ID
		if c.Spec.Timeout != "" {
			c.Timeout, _ = ParseDuration(c.Spec.Timeout)
		} else {
			c.Timeout = time.Duration(h.q.TimeoutMS) * time.Millisecond
		}
		out[i] = c
		if err := addEvent(ctx, tx, now, event{Kind: "task." + TaskDoing, TaskID: best.ID, From: TaskTodo, To: TaskDoing}); err != nil {
			return nil, err
		}
		if err := addEvent(ctx, tx, now, event{Kind: "run.queued", TaskID: c.TaskID, RunID: c.RunID, To: RunQueued,
			Data: rawJSON(`{"attempt":` + strconv.Itoa(attempt) + `,"worker":` + string(w) + `}`)}); err != nil {
			return nil, err
		}
	}
	err = inChunks(len(out), func(lo, hi int) error {
		args := make([]any, 0, 12*(hi-lo))
		for _, c := range out[lo:hi] {
			args = append(args, c.RunID, c.TaskID, c.Attempt, c.Queue, worker, host, c.Token, lease, bootID, claimed, until, at)
		}
		return tx.Run(claimRunsSQL.get(hi-lo), args...)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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

// The batched statements, for k rows: built once per k.
var (
	claimHeadsSQL = newSQLByCount(func(k int) string { return sqlClaimHeads + strconv.Itoa(k) })
	claimTasksSQL = newSQLByCount(func(k int) string {
		return `UPDATE tasks SET state = ?, updated_at = ?, attempts = attempts + 1, todo_at = NULL
			WHERE id IN (` + strings.TrimSuffix(strings.Repeat("CAST(? AS TEXT),", k), ",") + `) AND +state = 'todo'`
	})
	// startRunsSQL: k starts, 5 values each (run id, token, start time,
	// pid, pgid). The +state keeps the planner on the runs' ids.
	startRunsSQL = newSQLByCount(func(k int) string {
		return `WITH v (id, token, at, pid, pgid) AS (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?),", k), ",") + `)
			UPDATE runs SET state = 'running', started_at = MAX(runs.created_at, v.at), pid = v.pid, pgid = v.pgid
			FROM v WHERE runs.id = v.id AND +runs.state = 'queued' AND runs.lease_token = v.token
			RETURNING runs.id, runs.task_id`
	})
	// endRunsSQL: k successful ends, 7 values each (run id, token, end
	// time, whether to keep the end after the run's creation and start
	// as endRun does for a given time, exit code, signal, error).
	endRunsSQL = newSQLByCount(func(k int) string {
		return `WITH v (id, token, ended, clamp, exit, sig, err) AS (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?),", k), ",") + `)
			UPDATE runs SET state = 'succeeded',
				ended_at = CASE WHEN v.clamp THEN MAX(v.ended, runs.created_at, COALESCE(runs.started_at, '')) ELSE v.ended END,
				exit_code = v.exit, signal = v.sig, error = v.err
			FROM v WHERE runs.id = v.id AND +runs.state = 'running' AND runs.lease_token = v.token
			RETURNING ` + qualified("runs", runViewCols)
	})
	// doneTasksSQL: k tasks doing → done, as finishTask writes them; ?1
	// and ?2 are the time.
	doneTasksSQL = newSQLByCount(func(k int) string {
		return `UPDATE tasks SET state = 'done', updated_at = ?, lane_head = 0, blocked_reason = NULL, finished_at = ?, reason = NULL
			WHERE id IN (` + strings.TrimSuffix(strings.Repeat("CAST(? AS TEXT),", k), ",") + `) AND +state = 'doing'
			RETURNING id, COALESCE(key, ''), EXISTS (SELECT 1 FROM task_deps WHERE dep_id = tasks.id)`
	})
	claimRunsSQL = newSQLByCount(func(k int) string {
		return `INSERT INTO runs (id, task_id, attempt, state, queue, worker, host, lease_token, lease_expires_at,
			boot_id, claimed_ns, lease_until_ns, created_at) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?),`, k), ",")
	})
)

// qualified prefixes each of the comma-separated columns with table.
func qualified(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
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

// claimable is a queue a claim may take from, with its room (runs it may
// still start; -1: no limit).
type claimable struct {
	row  *queueRow
	room int
}

// claimableQueues are the queues a claim may take from now: not paused,
// below their concurrency, among the wanted ones.
func claimableQueues(ctx context.Context, tx *sqlite.Tx, wanted []string) ([]*claimable, error) {
	q := `SELECT ` + queueCols + ` FROM queues WHERE paused = 0`
	var args []any
	if len(wanted) > 0 {
		q += ` AND name IN (` + strings.TrimSuffix(strings.Repeat("?,", len(wanted)), ",") + `)`
		for _, w := range wanted {
			args = append(args, w)
		}
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var all []*queueRow
	for rows.Next() {
		r, err := scanQueue(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]*claimable, 0, len(all))
	for _, r := range all {
		room := -1
		if r.Concurrency > 0 {
			var live int
			if err := tx.QueryRowContext(ctx, sqlQueueLive,
				r.Name).Scan(&live); err != nil {
				return nil, err
			}
			if live >= r.Concurrency {
				continue
			}
			room = r.Concurrency - live
		}
		out = append(out, &claimable{row: r, room: room})
	}
	return out, nil
}

// runRow is a runs row as a worker or the reaper needs it.
type runRow struct {
	store.Run
	// reapAt, set by the reaper, adds "and the lease expired at this
	// instant" to the CAS.
	reapAt *leaseNow
}

// runRowCols and scanRunRow read a runRow in the statements not yet moved
// into the backend.
const runRowCols = sqlite.RunCols

func scanRunRow(sc interface{ Scan(...any) error }, r *runRow, more ...any) error {
	return sqlite.ScanRun(sc, &r.Run, more...)
}

func getRun(ctx context.Context, q store.Reader, id string) (*runRow, error) {
	r, err := q.RunGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no run %q", id)
	}
	if err != nil {
		return nil, err
	}
	return &runRow{Run: *r}, nil
}

// fenced is the error a worker gets for a write its lease no longer
// covers (the token does not match, or the lease expired): it must write
// nothing more for the run.
func fenced(runID string) error {
	return conflictf("run %s: lease lost (it expired, or the run was ended or taken over); nothing written", runID)
}

// StartRun records that the run's process has started: queued → running.
// A lost CAS (cancelled or reaped meanwhile, or another token) means the
// worker must kill the process group it just started.
func (s *Store) StartRun(ctx context.Context, runID, token string, pid, pgid int) error {
	errs, err := s.StartRuns(ctx, []Start{{RunID: runID, Token: token, Pid: pid, Pgid: pgid}})
	if err != nil {
		return err
	}
	return errs[0]
}

// Start is one run whose process has started.
type Start struct {
	RunID, Token string
	Pid, Pgid    int
	// At is when the process started (zero: now). A worker records starts
	// a few milliseconds late, with the ends that follow them; started_at
	// is At, kept between the run's creation and the commit.
	At time.Time
}

// StartRuns records several starts in one transaction; errs[i] is the
// outcome of starts[i] (a conflict: kill that run's group).
func (s *Store) StartRuns(ctx context.Context, starts []Start) (errs []error, err error) {
	err = s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		errs = make([]error, len(starts))
		return s.startAll(ctx, tx, now, starts, errs)
	})
	return errs, err
}

// startAll records starts: one UPDATE moves every run that is still
// queued under its token to running (a CAS on each), and each start it
// did not move goes through startTx, which finds it refused again and
// says why in errs. A refusal is not an error of the transaction.
func (s *Store) startAll(ctx context.Context, tx *sqlite.Tx, now time.Time, starts []Start, errs []error) error {
	if len(starts) == 0 {
		return nil
	}
	if s.perRow {
		for i, st := range starts {
			errs[i] = startTx(ctx, tx, now, st)
			if errs[i] != nil && !IsConflict(errs[i]) && !IsNotFound(errs[i]) {
				return errs[i]
			}
		}
		return nil
	}
	started := make(map[string]string, len(starts)) // run id → task id
	err := inChunks(len(starts), func(lo, hi int) error {
		args := make([]any, 0, 5*(hi-lo))
		for _, st := range starts[lo:hi] {
			at := now
			if !st.At.IsZero() && st.At.Before(now) {
				at = st.At
			}
			args = append(args, st.RunID, st.Token, FormatTime(at), st.Pid, st.Pgid)
		}
		rows, err := tx.QueryContext(ctx, startRunsSQL.get(hi-lo), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, task string
			if err := rows.Scan(&id, &task); err != nil {
				return err
			}
			started[id] = task
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	for i, st := range starts {
		task, ok := started[st.RunID]
		if !ok {
			errs[i] = startTx(ctx, tx, now, st)
			if errs[i] != nil && !IsConflict(errs[i]) && !IsNotFound(errs[i]) {
				return errs[i]
			}
			continue
		}
		delete(started, st.RunID) // a run given twice starts once
		if err := addEvent(ctx, tx, now, event{Kind: "run." + RunRunning, TaskID: task, RunID: st.RunID, From: RunQueued, To: RunRunning}); err != nil {
			return err
		}
	}
	return nil
}

// startTx is one queued → running CAS; it writes nothing if it fails.
func startTx(ctx context.Context, tx *sqlite.Tx, now time.Time, st Start) error {
	// The CAS first, in one statement; the run is read only to say why
	// the CAS was refused.
	var taskID string
	at := now
	if !st.At.IsZero() && st.At.Before(now) {
		at = st.At
	}
	// Fixed-width times compare as text.
	err := tx.QueryRowContext(ctx, `UPDATE runs SET state = 'running', started_at = MAX(created_at, ?), pid = ?, pgid = ?
		WHERE id = ? AND state = 'queued' AND lease_token = ? RETURNING task_id`,
		FormatTime(at), st.Pid, st.Pgid, st.RunID, st.Token).Scan(&taskID)
	if errors.Is(err, sql.ErrNoRows) {
		r, err := getRun(ctx, tx, st.RunID)
		switch {
		case err != nil:
			return err
		case r.Token != st.Token:
			return fenced(st.RunID)
		default:
			return conflictf("run %s is %s, not queued", st.RunID, r.State)
		}
	}
	if err != nil {
		return err
	}
	return addEvent(ctx, tx, now, event{Kind: "run." + RunRunning, TaskID: taskID, RunID: st.RunID, From: RunQueued, To: RunRunning})
}

// casRunToken is casRun guarded by the run's lease token as well.
func casRunToken(ctx context.Context, tx *sqlite.Tx, now time.Time, r *runRow, to, reason, set string, args ...any) error {
	q := `UPDATE runs SET state = ?, reason = COALESCE(?, reason)`
	if set != "" {
		q += `, ` + set
	}
	q += ` WHERE id = ? AND state = ? AND lease_token = ?`
	all := append([]any{to, nullable(reason)}, args...)
	all = append(all, r.ID, r.State, r.Token)
	if r.reapAt != nil {
		q += ` AND ` + sqlLeaseExpired
		all = append(all, r.reapAt.args()...)
	}
	res, err := tx.ExecContext(ctx, q, all...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		cur, err := getRun(ctx, tx, r.ID)
		if err != nil {
			return err
		}
		if cur.Token != r.Token {
			return fenced(r.ID)
		}
		if cur.State == r.State && r.reapAt != nil {
			// Same state and token: only the expiry guard refused it.
			return conflictf("run %s: its lease was renewed meanwhile; not reaped", r.ID)
		}
		return conflictf("run %s is %s, not %s", r.ID, cur.State, r.State)
	}
	return addEvent(ctx, tx, now, event{Kind: "run." + to, TaskID: r.TaskID, RunID: r.ID, From: r.State, To: to, Reason: reason})
}

// Queries on live runs. Each repeats runs_live's own condition (schema.sql,
// migration 5), so that SQLite can prove the partial index holds every
// row the query wants: without it these scans read every run ever kept.
const (
	liveRuns          = `(state = 'queued' OR state = 'running' OR state = 'cancelling')`
	sqlCancellingRuns = `SELECT id FROM runs WHERE ` + liveRuns + ` AND state = 'cancelling' AND worker = ?`
	sqlQueuedTooLong  = `SELECT id FROM runs WHERE ` + liveRuns + ` AND state = 'queued' AND queue = ? AND ` + sqlStartedLate + ` LIMIT 500`
	sqlExpiredLeases  = `SELECT id FROM runs WHERE ` + liveRuns + ` AND ` + sqlLeaseExpired + ` LIMIT 500`
	sqlQueueLive      = `SELECT COUNT(*) FROM runs WHERE queue = ? AND ` + liveRuns
	sqlLiveRunsOnHost = `SELECT ` + runRowCols + `, COALESCE(worker,'') FROM runs WHERE ` + liveRuns + ` AND host = ?`
)

// LiveRun is a run not yet ended and the worker that holds it.
type LiveRun struct {
	Reaped // From is its state; To is empty
	Worker string
}

// LiveRunsOn lists the runs not yet ended that workers of host hold.
func (s *Store) LiveRunsOn(ctx context.Context, host string) ([]LiveRun, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, sqlLiveRunsOnHost, host)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LiveRun
	for rows.Next() {
		var r runRow
		var worker string
		if err := scanRunRow(rows, &r, &worker); err != nil {
			return nil, err
		}
		out = append(out, LiveRun{Reaped: reaped(&r, r.State, ""), Worker: worker})
	}
	return out, rows.Err()
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
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		exp := now.Add(ttl)
		ln := s.leaseNow(now)
		wall, bootID, until := ln.lease(ttl)
		args := append([]any{wall, bootID, until, runID, token}, ln.args()...)
		rows, err := tx.QueryContext(ctx, sqlRenewLease, args...)
		if err != nil {
			return err
		}
		// Drain RETURNING to the end: a statement left un-stepped keeps
		// SQLite from checkpointing the WAL.
		found := false
		for rows.Next() {
			if err := rows.Scan(&out.State); err != nil {
				rows.Close()
				return err
			}
			found = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if !found {
			return fenced(runID)
		}
		out.Expires = exp
		return nil
	})
	return out, err
}

// sqlRenewLease renews a lease on the boot clock: a renewal by a cq that
// has none (no boot id) leaves the run to be judged on the wall clock.
const sqlRenewLease = `UPDATE runs SET lease_expires_at = ?, boot_id = ?, lease_until_ns = ?
	WHERE id = ? AND lease_token = ? AND ` + liveRuns + ` AND ` + sqlLeaseValid + `
	RETURNING state`

// RunState returns a run's current state (a worker polls it to notice a
// cancel).
func (s *Store) RunState(ctx context.Context, runID string) (string, error) {
	var st string
	err := s.DB.SQL.QueryRowContext(ctx, `SELECT state FROM runs WHERE id = ?`, runID).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFoundf("no run %q", runID)
	}
	return st, err
}

// Outcome is how a run ended, as its worker saw it.
type Outcome struct {
	State    string // succeeded, failed, timeout or cancelled
	ExitCode *int
	Signal   string
	Error    string
	// Class is the failure class of a failed run (ClassOther by default).
	Class string
	// At is when the process ended (zero: now). A worker records ends a
	// few milliseconds late, several to a commit; ended_at is At, kept
	// between the run's start (or creation) and the commit.
	At time.Time
}

// FinishRun records a run's end and its task's outcome in one
// transaction: succeeded → task done (dependents may become runnable);
// failed or timeout → blocked for a retry while the class budget lasts,
// else failed (dependents cancelled); a run that was being cancelled ends
// its task cancelled unless it succeeded. Every write is guarded by the
// lease token: a fenced worker gets a conflict and changes nothing.
func (s *Store) FinishRun(ctx context.Context, runID, token string, o Outcome) (taskState string, err error) {
	res, err := s.FinishRuns(ctx, []Finish{{RunID: runID, Token: token, Outcome: o}}, nil)
	if err != nil {
		return "", err
	}
	return res.Finished[0].TaskState, res.Finished[0].Err
}

// Finish is one run's end as its worker saw it. Release gives the run
// back instead (graceful stop).
type Finish struct {
	RunID, Token string
	Outcome      Outcome
	Release      bool
}

// Finished is what recording one Finish did.
type Finished struct {
	TaskState string
	// Run is the run as stored now, for its summary.json.
	Run *Run
	Err error
}

// FinishResult is the outcome of FinishRuns.
type FinishResult struct {
	Finished []Finished
	Claimed  []*Claimed
	// StartErrs are Cycle's refused starts, by position (nil: started).
	StartErrs []error
}

// FinishRuns records several ends in one transaction, each on its own (a
// refused one changes nothing and does not stop the others), and then, if
// claim is set, claims up to claim.N tasks in the same transaction, so
// that a busy worker pays one commit per cycle instead of one per step.
func (s *Store) FinishRuns(ctx context.Context, fs []Finish, claim *ClaimN) (FinishResult, error) {
	return s.Cycle(ctx, nil, fs, claim)
}

// Cycle is a worker's whole step in one transaction: it records starts
// (queued → running, each on its own like StartRuns; refusals are in
// StartErrs), then ends (like FinishRuns), then claims. A busy worker
// thus pays one commit per cycle: the starts of the runs it launched
// last time ride with the ends that come next.
func (s *Store) Cycle(ctx context.Context, starts []Start, fs []Finish, claim *ClaimN) (FinishResult, error) {
	var res FinishResult
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		res = FinishResult{Finished: make([]Finished, len(fs)), StartErrs: make([]error, len(starts))}
		if err := s.startAll(ctx, tx, now, starts, res.StartErrs); err != nil {
			return err
		}
		done := make([]bool, len(fs))
		if !s.perRow {
			var err error
			if done, err = finishSucceeded(ctx, tx, now, fs, res.Finished); err != nil {
				return err
			}
		}
		for i, f := range fs {
			if done[i] {
				continue
			}
			if err := tx.Savepoint("finish"); err != nil {
				return err
			}
			st, err := finishTx(ctx, tx, now, f)
			if err != nil {
				if !IsConflict(err) && !IsNotFound(err) {
					return err
				}
				if err := tx.RollbackTo("finish"); err != nil {
					return err
				}
				res.Finished[i].Err = err
			} else {
				res.Finished[i].TaskState = st
				res.Finished[i].Run, _ = runView(ctx, tx, f.RunID)
			}
			if err := tx.Release("finish"); err != nil {
				return err
			}
		}
		if claim != nil && claim.N > 0 {
			var err error
			res.Claimed, err = claimTx(ctx, tx, s.leaseNow(now), claim.Params, claim.N)
			return err
		}
		return nil
	})
	return res, err
}

// finishSucceeded records at once the ends of fs that are plain
// successes (not a release) of runs still running under their token: one
// UPDATE ends the runs (a CAS on each) and returns them as cq shows them,
// one UPDATE moves their tasks doing → done (a CAS on each), then each
// task hands its lane on and tells its dependents, as finishTask does.
// done[i] is set for each end recorded here; the others are left to
// finishTx, which records them or says why not. If a task of an ended
// run is not doing (the store broke an invariant), nothing is written
// here and finishTx meets it.
func finishSucceeded(ctx context.Context, tx *sqlite.Tx, now time.Time, fs []Finish, out []Finished) ([]bool, error) {
	done := make([]bool, len(fs))
	var idx []int
	args := make([]any, 0, 7*len(fs))
	seen := make(map[string]bool, len(fs))
	for i, f := range fs {
		if f.Release || f.Outcome.State != RunSucceeded || seen[f.RunID] {
			continue
		}
		seen[f.RunID] = true
		o := f.Outcome
		ended, clamp := FormatTime(now), 0
		if !o.At.IsZero() && o.At.Before(now) {
			ended, clamp = FormatTime(o.At), 1
		}
		var exit any
		if o.ExitCode != nil {
			exit = *o.ExitCode
		}
		idx = append(idx, i)
		args = append(args, f.RunID, f.Token, ended, clamp, exit, nullable(o.Signal), nullable(o.Error))
	}
	if len(idx) == 0 {
		return done, nil
	}
	if err := tx.Savepoint("succeeded"); err != nil {
		return nil, err
	}
	runs, err := endRunsSucceeded(ctx, tx, idx, args)
	if err != nil {
		return nil, err
	}
	var tasks []any
	for _, i := range idx {
		if r := runs[fs[i].RunID]; r != nil {
			tasks = append(tasks, r.TaskID)
		}
	}
	var ended map[string]endedTask
	if len(tasks) > 0 {
		if ended, err = doneTasks(ctx, tx, now, tasks); err != nil {
			return nil, err
		}
	}
	if len(ended) != len(tasks) {
		if err := tx.RollbackTo("succeeded"); err != nil {
			return nil, err
		}
		return done, tx.Release("succeeded")
	}
	for _, i := range idx {
		r := runs[fs[i].RunID]
		if r == nil {
			continue
		}
		done[i] = true
		out[i] = Finished{TaskState: TaskDone, Run: r}
		if err := addEvent(ctx, tx, now, event{Kind: "run." + RunSucceeded, TaskID: r.TaskID, RunID: r.ID, From: RunRunning, To: RunSucceeded}); err != nil {
			return nil, err
		}
		if err := addEvent(ctx, tx, now, event{Kind: "task." + TaskDone, TaskID: r.TaskID, From: TaskDoing, To: TaskDone}); err != nil {
			return nil, err
		}
	}
	for _, t := range tasks {
		e := ended[t.(string)]
		// A doing task holds its lane: it was its head when claimed.
		if err := advanceLane(ctx, tx, e.key); err != nil {
			return nil, err
		}
		if e.dependents {
			if err := releaseDependents(ctx, tx, now, t.(string)); err != nil {
				return nil, err
			}
		}
	}
	return done, tx.Release("succeeded")
}

// endRunsSucceeded ends the runs of fs[idx] succeeded, with args (7 per
// run, in endRunsSQL's order), and returns those it ended, by id.
func endRunsSucceeded(ctx context.Context, tx *sqlite.Tx, idx []int, args []any) (map[string]*Run, error) {
	out := make(map[string]*Run, len(idx))
	err := inChunks(len(idx), func(lo, hi int) error {
		rows, err := tx.QueryContext(ctx, endRunsSQL.get(hi-lo), args[7*lo:7*hi]...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRunView(rows)
			if err != nil {
				return err
			}
			out[r.ID] = &r
		}
		return rows.Err()
	})
	return out, err
}

// endedTask is what finishing a task needs to know after the UPDATE.
type endedTask struct {
	key        string
	dependents bool
}

// doneTasks moves tasks doing → done and returns those it moved.
func doneTasks(ctx context.Context, tx *sqlite.Tx, now time.Time, ids []any) (map[string]endedTask, error) {
	at := FormatTime(now)
	out := make(map[string]endedTask, len(ids))
	err := inChunks(len(ids), func(lo, hi int) error {
		rows, err := tx.QueryContext(ctx, doneTasksSQL.get(hi-lo), append([]any{at, at}, ids[lo:hi]...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var e endedTask
			if err := rows.Scan(&id, &e.key, &e.dependents); err != nil {
				return err
			}
			out[id] = e
		}
		return rows.Err()
	})
	return out, err
}

// ClaimN asks FinishRuns to claim up to N tasks after recording the ends.
type ClaimN struct {
	Params ClaimParams
	N      int
}

func finishTx(ctx context.Context, tx *sqlite.Tx, now time.Time, f Finish) (string, error) {
	r, err := getRun(ctx, tx, f.RunID)
	if err != nil {
		return "", err
	}
	if r.Token != f.Token {
		return "", fenced(f.RunID)
	}
	if f.Release {
		reason := "released"
		if r.State == RunCancelling {
			reason = ""
		}
		// How its process ended (the signal of the stop's kill, or an
		// exit code) is kept; a run released before its start has none.
		o := f.Outcome
		return endRun(ctx, tx, now, r, Outcome{State: RunCancelled, ExitCode: o.ExitCode, Signal: o.Signal, Error: o.Error, At: o.At}, reason)
	}
	return endRun(ctx, tx, now, r, f.Outcome, "")
}

// endRun moves a live run to its terminal state and decides its task.
func endRun(ctx context.Context, tx *sqlite.Tx, now time.Time, r *runRow, o Outcome, reason string) (string, error) {
	switch {
	case RunTerminal(r.State):
		return "", conflictf("run %s already ended %s", r.ID, r.State)
	case !RunTransitionAllowed(r.State, o.State),
		r.State == RunRunning && o.State == RunCancelled && reason != "released":
		return "", conflictf("run %s is %s; cannot end it %s", r.ID, r.State, o.State)
	}
	var exit any
	if o.ExitCode != nil {
		exit = *o.ExitCode
	}
	if reason == "" && r.State == RunCancelling && o.State == RunCancelled {
		// Only a user's cancel moves a run to cancelling.
		reason = "cancelled by user"
	}
	ended := FormatTime(now)
	if !o.At.IsZero() && o.At.Before(now) {
		// Fixed-width times compare as text.
		ended = max(FormatTime(o.At), r.Created, r.Started)
	}
	if err := casRunToken(ctx, tx, now, r, o.State, reason, `ended_at = ?, exit_code = ?, signal = ?, error = ?`,
		ended, exit, nullable(o.Signal), nullable(o.Error)); err != nil {
		return "", err
	}
	t, err := getTask(ctx, tx, r.TaskID)
	if err != nil {
		return "", err
	}
	if t.State != TaskDoing {
		return "", conflictf("task %s is %s, not doing", t.ID, t.State)
	}
	wasCancelling := r.State == RunCancelling
	switch {
	case o.State == RunSucceeded:
		return TaskDone, finishTask(ctx, tx, now, t, TaskDone, "")
	case o.State == RunCancelled && reason == "released":
		err := casTask(ctx, tx, now, t, TaskTodo, "", "released", store.TaskUpdate{
			Set: store.SetTodoAt | store.ClearWarned, TodoAt: FormatTime(now)})
		return TaskTodo, err
	case wasCancelling || o.State == RunCancelled:
		return TaskCancelled, cancelTask(ctx, tx, now, t, "cancelled by user")
	}
	// failed or timeout: spend the class budget.
	class := o.Class
	if o.State == RunTimeout && class == "" {
		class = ClassTimeout
	}
	if class == "" {
		class = ClassOther
	}
	q, err := getQueue(ctx, tx, t.Queue)
	if err != nil {
		return "", err
	}
	budget, spent, spend := 0, 0, false
	switch class {
	case ClassOther:
		var sp Spec
		_ = json.Unmarshal([]byte(t.Spec), &sp)
		budget, spent, spend = q.Retries, t.FailsOther, true
		if sp.Retries != nil {
			budget = *sp.Retries
		}
	case ClassTransient:
		budget, spent, spend = q.TransientRetries, t.FailsTransient, true
	case ClassTimeout:
		budget, spent, spend = q.TimeoutRetries, t.FailsTimeout, true
	}
	why := describe(o)
	if spend && spent < budget {
		nb := now.Add(Backoff(class, spent+1, time.Duration(q.BackoffMS)*time.Millisecond))
		err := casTask(ctx, tx, now, t, TaskBlocked, "", "retry after "+why, store.TaskUpdate{
			Set:           store.SpendFail | store.SetBlockedReason | store.SetNotBefore | store.SetReason,
			FailClass:     class,
			BlockedReason: BlockedRetry, NotBefore: FormatTime(nb), NotBeforeWhy: BlockedRetry, Reason: "retry after " + why})
		return TaskBlocked, err
	}
	u := store.TaskUpdate{}
	if spend {
		u.Set, u.FailClass = store.SpendFail, class
	}
	return TaskFailed, finishTaskSet(ctx, tx, now, t, TaskFailed, why, u)
}

// describe says in a few words why a run failed, for the task's reason.
func describe(o Outcome) string {
	switch {
	case o.Error != "":
		return o.Error
	case o.Signal != "":
		return "killed by " + o.Signal
	case o.ExitCode != nil:
		return "exit code " + strconv.Itoa(*o.ExitCode)
	}
	return o.State
}

// Backoff is the delay before retry number n (1-based) of a class: the
// transient class waits 30 s, 60 s, 120 s…; a timeout 5 min; any other
// failure base·2^(n-1) with ±20 % jitter, capped at one hour.
func Backoff(class string, n int, base time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	switch class {
	case ClassTransient:
		return 30 * time.Second * time.Duration(1<<min(n-1, 10))
	case ClassTimeout:
		return 5 * time.Minute
	}
	if base <= 0 {
		base = 30 * time.Second
	}
	d := float64(base) * math.Pow(2, float64(n-1))
	d = math.Min(d, float64(time.Hour))
	d *= 0.8 + 0.4*mrand.Float64()
	return min(time.Duration(d), time.Hour)
}

// finishTask ends a doing task done or failed, hands its lane on, and
// tells its dependents.
func finishTask(ctx context.Context, tx *sqlite.Tx, now time.Time, t *taskRow, to, reason string) error {
	return finishTaskSet(ctx, tx, now, t, to, reason, store.TaskUpdate{})
}

func finishTaskSet(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, to, reason string, u store.TaskUpdate) error {
	u.Set |= store.SetLaneHead | store.SetBlockedReason | store.SetFinishedAt | store.SetReason
	u.FinishedAt, u.Reason = FormatTime(now), reason
	if err := casTask(ctx, tx, now, t, to, "", reason, u); err != nil {
		return err
	}
	if t.LaneHead {
		if err := advanceLane(ctx, tx, t.Key); err != nil {
			return err
		}
	}
	if to == TaskDone {
		return releaseDependents(ctx, tx, now, t.ID)
	}
	return cancelDependents(ctx, tx, now, t.ID, "dependency "+t.ID+" "+to)
}

// releaseDependents counts a finished dependency off its dependents and
// moves those that nothing blocks any more from blocked to todo.
func releaseDependents(ctx context.Context, tx store.Tx, now time.Time, dep string) error {
	ready, err := tx.TaskDependencyDone(ctx, dep)
	if err != nil {
		return err
	}
	for _, t := range ready {
		br := blockedReason(t.Hold, 0, t.NotBefore, t.NotBeforeWhy, now)
		if br != "" {
			if err := tx.TaskSetBlockedReason(ctx, t.ID, br); err != nil {
				return err
			}
			continue
		}
		if err := casTask(ctx, tx, now, t, TaskTodo, "", "dependencies done", todoNow(now)); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseRun gives a run back at a worker's graceful stop: the run ends
// cancelled (reason released) and its task returns to todo, spending no
// retry budget. A run a user was cancelling ends its task cancelled.
func (s *Store) ReleaseRun(ctx context.Context, runID, token string) (string, error) {
	res, err := s.FinishRuns(ctx, []Finish{{RunID: runID, Token: token, Release: true}}, nil)
	if err != nil {
		return "", err
	}
	return res.Finished[0].TaskState, res.Finished[0].Err
}

// Reaped is a run the reaper ended because its lease expired.
type Reaped struct {
	RunID, TaskID, From, To, Host string
	Pgid                          int
	// Claimed and Started are the run's claim and recorded start (zero if
	// it never started): its process group's leader started in between.
	Claimed, Started time.Time
}

// reaped describes run r, ended from state from to to.
func reaped(r *runRow, from, to string) Reaped {
	rp := Reaped{RunID: r.ID, TaskID: r.TaskID, From: from, To: to, Host: r.Host, Pgid: r.Pgid,
		Claimed: ParseStoredTime(r.Created)}
	if r.Started != "" {
		rp.Started = ParseStoredTime(r.Started)
	}
	return rp
}

// ReapExpiredThen ends runs whose lease expired (their worker is lost):
// running → failed (lease_expired, transient class), cancelling →
// cancelled, queued → failed. Each CAS checks the token and that the lease
// is still expired, so a run its worker completed or renewed meanwhile is
// never touched. It calls stop for each run it ends, inside the
// transaction, before the commit that frees the run's task (and its key's
// lane) for another run: the caller kills the lost run's processes there,
// so that they are gone before anyone may take the task again.
func (s *Store) ReapExpiredThen(ctx context.Context, stop func(Reaped)) ([]Reaped, error) {
	var out []Reaped
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		out = out[:0]
		ln := s.leaseNow(now)
		ids, err := queryIDs(ctx, tx, sqlExpiredLeases, ln.args()...)
		if err != nil {
			return err
		}
		for _, id := range ids {
			r, err := getRun(ctx, tx, id)
			if err != nil {
				return err
			}
			if RunTerminal(r.State) || !ln.expired(r) {
				continue
			}
			r.reapAt = &ln
			o := Outcome{State: RunFailed, Class: ClassTransient, Error: "lease expired (worker lost)"}
			switch r.State {
			case RunQueued:
				// Its process may have started, and even ended: the
				// worker was lost before it could record either.
				o.Error = "lease expired before the start was recorded (worker lost)"
			case RunCancelling:
				o = Outcome{State: RunCancelled, Error: "lease expired while cancelling"}
			}
			if _, err := endRun(ctx, tx, now, r, o, "lease_expired"); err != nil {
				return err
			}
			out = append(out, reaped(r, r.State, o.State))
			if stop != nil {
				stop(out[len(out)-1])
			}
		}
		return nil
	})
	return out, err
}
