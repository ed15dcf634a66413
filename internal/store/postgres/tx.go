package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnknownOutcome is what a write returns when the connection was lost
// while its COMMIT was on the way and the server could not be asked
// afterwards whether it committed: the user checks what it did.
var ErrUnknownOutcome = errors.New("the database connection was lost during a commit, and whether it committed is unknown")

// Writes are transactions at READ COMMITTED. What a single writer gives
// SQLite for free is taken here with locks, in one order everywhere so
// that transactions do not deadlock in the common paths: task rows, then
// a key's advisory lock (lanes, --unique), then a queue's row (its live
// runs, kept by the trigger on runs), then the event counter, last, as
// the transaction commits (docs/store.md, PostgreSQL).
//
// A transaction the server gives up (a deadlock found, a serialization
// failure, its connection lost before COMMIT was sent) changed nothing
// and is run again from the start, up to maxAttempts times: the domain's
// functions read what they act on inside the transaction. One whose
// COMMIT was sent and whose connection was lost is resolved by asking the
// server, on a new connection, whether its transaction id committed.
const maxAttempts = 8

// write runs fn in a write transaction and commits it; wait above 0 bounds
// each wait for a lock (store.ErrBusy past it).
func (d *DB) write(ctx context.Context, wait time.Duration, fn func(tx *Tx) error) error {
	backoff := 5 * time.Millisecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := d.writeOnce(ctx, wait, fn)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return d.explain(err)
		}
		// A server out of reach is waited for as long as a read waits (a
		// failover takes seconds); a conflict is run again maxAttempts
		// times.
		if attempt >= maxAttempts && (!isConnError(err) || time.Since(start) >= readRetryFor) {
			return d.explain(err)
		}
		// Jitter, so that two transactions that deadlocked do not meet
		// again at once.
		sleep := backoff/2 + rand.N(backoff)
		select {
		case <-ctx.Done():
			return d.explain(err)
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// retryable reports whether err ended a transaction that changed nothing
// and may simply be run again.
func retryable(err error) bool {
	if errors.Is(err, errAborted) {
		return true
	}
	if isCode(err, "40001", "40P01") { // serialization_failure, deadlock_detected
		return true
	}
	// unique_violation: cq looks before it inserts (a task's id, a
	// --unique key), so a violation is another transaction's insert
	// committed between the look and the insert; run again, the look
	// sees it (the same spec again, or a conflict).
	if isCode(err, "23505") {
		return true
	}
	var ce *commitError
	if errors.As(err, &ce) {
		return false
	}
	return isConnError(err)
}

// errAborted: the commit's connection was lost, and the server said
// afterwards that the transaction did not commit.
var errAborted = errors.New("transaction aborted with its connection")

// commitError wraps a failure of COMMIT itself, which is never retried
// blindly.
type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// isConnError reports whether err is a failure to reach the server or a
// connection lost, rather than the server refusing a statement.
func isConnError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The server ended the session: shutdown, admin_shutdown,
		// crash_shutdown, cannot_connect_now, idle in transaction timeout.
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "25P03" ||
			pe.Code[:2] == "08"
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	// A connection pgx closed after a failure, or one the server's end
	// of which went away mid-message.
	return errors.As(err, &ne) || errors.As(err, &ce) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func (d *DB) writeOnce(ctx context.Context, wait time.Duration, fn func(tx *Tx) error) (err error) {
	c, err := d.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	// Once begun, a transaction runs to its commit or rollback whatever
	// the caller's context does (statement_timeout bounds each
	// statement): a rollback half-sent would leave the connection
	// unusable.
	bg := context.WithoutCancel(ctx)
	ptx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = ptx.Rollback(bg)
		}
	}()
	if wait > 0 {
		if _, err := ptx.Exec(bg, "SET LOCAL lock_timeout = "+strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
			return err
		}
	}
	t := &Tx{ptx: ptx, ctx: bg, db: d, base: -1}
	t.reads = reads{q: ptx, tx: t}
	if err := fn(t); err != nil {
		if wait > 0 && isCode(err, "55P03") { // lock_not_available
			return fmt.Errorf("%w: another writer held a lock for more than %s", store.ErrBusy, wait)
		}
		return err
	}
	xid, tl, err := t.flush()
	if err != nil {
		if wait > 0 && isCode(err, "55P03") {
			return fmt.Errorf("%w: another writer held a lock for more than %s", store.ErrBusy, wait)
		}
		return err
	}
	err = ptx.Commit(bg)
	done = true
	if err == nil {
		return nil
	}
	if !isConnError(err) {
		return &commitError{err}
	}
	return d.resolve(ctx, xid, tl, err)
}

// resolve finds out whether transaction xid, whose COMMIT failed with
// err on a lost connection, committed: nil when it did, errAborted when it
// did not (it may be run again).
func (d *DB) resolve(ctx context.Context, xid int64, tl string, err error) error {
	deadline := time.Now().Add(30 * time.Second)
	unknown := &commitError{fmt.Errorf("%w: %w", ErrUnknownOutcome, err)}
	for {
		var status *string
		var now string
		qerr := d.Pool.QueryRow(ctx, `SELECT txid_status($1), `+sqlTimeline, xid).Scan(&status, &now)
		switch {
		case qerr == nil && now != tl:
			// Another history (a standby promoted since): its
			// transaction ids are not the ones the transaction had, so
			// what it says of xid says nothing of the transaction.
			return unknown
		case qerr == nil && status != nil && *status == "committed":
			return nil
		case qerr == nil && status != nil && *status == "aborted":
			return errAborted
		case qerr == nil && status == nil:
			// Too old to tell: cannot happen seconds later, but say so.
			return unknown
		}
		// In progress (the server has not seen the connection go yet), or
		// the server cannot be reached now: ask again.
		if time.Now().After(deadline) || ctx.Err() != nil {
			return unknown
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sqlTimeline is the primary's current timeline, which a promotion
// changes: the first 8 hex digits of its WAL file's name. A standby
// refuses it (and is asked again, until the deadline).
const sqlTimeline = `substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)`

// Tx is a write transaction. Its events are kept in memory until it
// commits, and written then, after every other statement, with their seqs
// taken from the one-row counter event_seq: the counter's row lock orders
// the event-writing part of commits, so seqs follow commit order.
type Tx struct {
	// reads are the store's reads (store.Reader) in this transaction.
	reads
	ptx pgx.Tx
	ctx context.Context
	db  *DB
	// events are those added and not yet written; base is the last seq
	// committed when first needed (-1 until then): events[i] is seq
	// base+1+i as far as this transaction can tell before it commits.
	events []store.Event
	base   int64
	// keys are the keys whose advisory lock this transaction holds, with
	// the number of savepoints open when it took it.
	keys map[string]int
	// savepoints are the open savepoints, with the events pending at each.
	savepoints []savepoint
}

type savepoint struct {
	name   string
	events int
}

// flush writes the pending events, taking their seqs from the counter,
// and notifies the store's listeners; it returns the transaction's id
// and the server's timeline, by which resolve learns its fate.
func (t *Tx) flush() (xid int64, tl string, err error) {
	if len(t.events) == 0 {
		err = t.ptx.QueryRow(t.ctx, `SELECT txid_current(), `+sqlTimeline).Scan(&xid, &tl)
		return xid, tl, err
	}
	n := len(t.events)
	cols := make([][]string, 8)
	for i := range cols {
		cols[i] = make([]string, n)
	}
	for i, e := range t.events {
		cols[0][i], cols[1][i], cols[2][i], cols[3][i] = e.At, e.Kind, e.TaskID, e.RunID
		cols[4][i], cols[5][i], cols[6][i], cols[7][i] = e.From, e.To, clean(e.Reason), clean(e.Data)
	}
	err = t.ptx.QueryRow(t.ctx, `WITH c AS (UPDATE event_seq SET last = last + $1 RETURNING last - $1 AS base),
		ins AS (INSERT INTO events (seq, at, kind, task_id, run_id, from_state, to_state, reason, data)
			SELECT c.base + e.n, e.at, e.kind, NULLIF(e.task_id, ''), NULLIF(e.run_id, ''), NULLIF(e.from_state, ''),
				NULLIF(e.to_state, ''), NULLIF(e.reason, ''), NULLIF(e.data, '')
			FROM c, unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
				WITH ORDINALITY AS e(at, kind, task_id, run_id, from_state, to_state, reason, data, n)
			RETURNING seq)
		SELECT pg_notify($10, (SELECT max(seq) FROM ins)::text), txid_current(), `+sqlTimeline,
		n, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], t.db.channel()).Scan(nil, &xid, &tl)
	return xid, tl, err
}

// channel is the name of the store's notification channel: one per
// schema, within the 63 bytes a channel name may have.
func (d *DB) channel() string { return d.notifyChannel }

func channelOf(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "cq_" + hex.EncodeToString(sum[:12])
}

// lockKey takes the advisory lock of key for the rest of the transaction,
// once: the lanes and --unique of one key are then changed by one
// transaction at a time, and each reads what the one before committed.
func (t *Tx) lockKey(ctx context.Context, key string) error {
	return t.lock(ctx, "key", key)
}

// lockTask takes the advisory lock of a task id that others depend on:
// an enqueue that counts its dependencies and the end of a dependency
// that counts itself off its dependents take turns.
func (t *Tx) lockTask(ctx context.Context, id string) error {
	return t.lock(ctx, "task", id)
}

func (t *Tx) lock(_ context.Context, kind, name string) error {
	k := kind + ":" + name
	if _, ok := t.keys[k]; ok {
		return nil
	}
	if _, err := t.ptx.Exec(t.ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "cq:"+t.db.Schema+":"+k); err != nil {
		return err
	}
	if t.keys == nil {
		t.keys = map[string]int{}
	}
	t.keys[k] = len(t.savepoints)
	return nil
}

// lastSeq is the last seq committed, read once per transaction.
func (t *Tx) lastSeq(ctx context.Context) (int64, error) {
	if t.base < 0 {
		if err := t.ptx.QueryRow(t.ctx, `SELECT last FROM event_seq`).Scan(&t.base); err != nil {
			return 0, err
		}
	}
	return t.base, nil
}

// EventAdd keeps e until the transaction commits (see Tx).
func (t *Tx) EventAdd(_ context.Context, e store.Event) error {
	t.events = append(t.events, e)
	return nil
}

// EventLastSeq is the seq of the newest event: this transaction's last,
// as numbered after the last seq committed when it first asked (its
// events get their real seqs as it commits), or that seq.
func (t *Tx) EventLastSeq(ctx context.Context) (int64, error) {
	base, err := t.lastSeq(ctx)
	return base + int64(len(t.events)), err
}

// EventCancelledTasks lists the tasks of the task.cancelled events above
// seq: those committed, up to the last seq this transaction read, and its
// own, numbered as EventLastSeq numbers them.
func (t *Tx) EventCancelledTasks(ctx context.Context, seq int64) ([]string, error) {
	base, err := t.lastSeq(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	if seq < base {
		if out, err = queryStrings(ctx, t.ptx, `SELECT task_id FROM events WHERE seq > $1 AND seq <= $2 AND kind = 'task.cancelled'
			AND task_id IS NOT NULL ORDER BY seq`, seq, base); err != nil {
			return nil, err
		}
	}
	for i, e := range t.events {
		if base+1+int64(i) > seq && e.Kind == "task.cancelled" && e.TaskID != "" {
			out = append(out, e.TaskID)
		}
	}
	return out, nil
}

// Savepoint opens a savepoint.
func (t *Tx) Savepoint(name string) error {
	if _, err := t.ptx.Exec(t.ctx, "SAVEPOINT "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	t.savepoints = append(t.savepoints, savepoint{name, len(t.events)})
	return nil
}

// RollbackTo undoes the writes since the savepoint name, the events added
// since included; the savepoint stays open. Advisory locks taken since
// are released with them.
func (t *Tx) RollbackTo(name string) error {
	i := t.mark(name)
	if i < 0 {
		return fmt.Errorf("no savepoint %q", name)
	}
	if _, err := t.ptx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	t.events = t.events[:t.savepoints[i].events]
	t.savepoints = t.savepoints[:i+1]
	for k, depth := range t.keys {
		if depth > i {
			delete(t.keys, k)
		}
	}
	return nil
}

// Release closes the savepoint name and those opened after it; their
// writes stay part of the transaction.
func (t *Tx) Release(name string) error {
	i := t.mark(name)
	if i < 0 {
		return fmt.Errorf("no savepoint %q", name)
	}
	if _, err := t.ptx.Exec(t.ctx, "RELEASE SAVEPOINT "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	t.savepoints = t.savepoints[:i]
	for k, depth := range t.keys {
		t.keys[k] = min(depth, i)
	}
	return nil
}

// mark is the place of the newest open savepoint name; -1 for none.
func (t *Tx) mark(name string) int {
	for i, s := range slices.Backward(t.savepoints) {
		if s.name == name {
			return i
		}
	}
	return -1
}

// TaskSeqNext is the next value of task_seq (see the migration).
func (t *Tx) TaskSeqNext(ctx context.Context) (int64, error) {
	var seq int64
	err := t.ptx.QueryRow(t.ctx, `SELECT nextval('task_seq')`).Scan(&seq)
	return seq, err
}
