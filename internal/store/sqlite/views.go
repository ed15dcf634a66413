package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

// The statements of store.ViewReader and store.ViewWriter: this file holds
// the snapshot, runs as shown, events and system state; views_list.go the
// task listings, views_queues.go the queues and views_workers.go the
// workers.

// sqlRunsCancelling lists a worker's runs a user asked to cancel: a
// worker polls it every 250 ms, so it reads runs_live (see runsLive).
const sqlRunsCancelling = `SELECT id FROM runs WHERE ` + runsLive + ` AND state = 'cancelling' AND worker = ?`

func (r reads) Snapshot(ctx context.Context, fn func(store.Reader) error) error {
	db, ok := r.q.(*sql.DB)
	if !ok {
		// A transaction reads one state already.
		return fn(r)
	}
	// One read transaction on a connection of its own. BEGIN on its own
	// is deferred: it takes no lock, and the snapshot starts with the
	// first SELECT.
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN`); err != nil {
		return err
	}
	defer func() { _, _ = c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`) }()
	return fn(reads{c})
}

func (r reads) SystemStateGet(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := r.q.QueryRowContext(ctx, `SELECT value FROM system_state WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}

// RunViewCols are the columns ScanRunView reads, in its order.
const RunViewCols = `id, task_id, attempt, state, exit_code, signal, worker, started_at, ended_at, error, reason, created_at`

// ScanRunView reads a row of RunViewCols into v.
func ScanRunView(sc interface{ Scan(...any) error }, v *store.RunView) error {
	var exit sql.NullInt64
	var sig, worker, started, ended, errs, reason sql.NullString
	if err := sc.Scan(&v.ID, &v.TaskID, &v.Attempt, &v.State, &exit, &sig, &worker, &started, &ended, &errs, &reason, &v.CreatedAt); err != nil {
		return err
	}
	v.ExitCode = nil
	if exit.Valid {
		n := int(exit.Int64)
		v.ExitCode = &n
	}
	v.Signal, v.Worker, v.StartedAt, v.EndedAt = sig.String, worker.String, started.String, ended.String
	v.Error, v.Reason = errs.String, reason.String
	return nil
}

func (r reads) RunViewGet(ctx context.Context, id string) (*store.RunView, error) {
	var v store.RunView
	err := ScanRunView(r.q.QueryRowContext(ctx, `SELECT `+RunViewCols+` FROM runs WHERE id = ?`, id), &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (r reads) RunViewList(ctx context.Context, taskID string) ([]store.RunView, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+RunViewCols+` FROM runs WHERE task_id = ? ORDER BY attempt`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.RunView{}
	for rows.Next() {
		var v store.RunView
		if err := ScanRunView(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (r reads) RunCancellingIDs(ctx context.Context, worker string) ([]string, error) {
	return queryStrings(ctx, r.q, sqlRunsCancelling, worker)
}

func (r reads) RunEndedCounts(ctx context.Context, since string, fn func(state string, n int)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT state, COUNT(*) FROM runs WHERE ended_at IS NOT NULL AND ended_at >= ? AND probe = 0 GROUP BY state`, since)
	return scanCounts(rows, err, fn)
}

func (r reads) RunEndedAvgSeconds(ctx context.Context, since string) (float64, bool, error) {
	var avg sql.NullFloat64
	err := r.q.QueryRowContext(ctx, `SELECT AVG((julianday(ended_at) - julianday(started_at)) * 86400.0) FROM runs
		WHERE ended_at IS NOT NULL AND ended_at >= ? AND started_at IS NOT NULL AND probe = 0`, since).Scan(&avg)
	return avg.Float64, avg.Valid, err
}

// scanCounts calls fn with each (text, count) row of rows.
func scanCounts(rows *sql.Rows, err error, fn func(string, int)) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	var k string
	var n int
	for rows.Next() {
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		fn(k, n)
	}
	return rows.Err()
}

// eventCols are the columns scanEvents reads.
const eventCols = `seq, at, kind, task_id, run_id, from_state, to_state, reason, data`

// scanEvents calls fn with each row of eventCols, one record reused.
func scanEvents(rows *sql.Rows, err error, fn func(*store.EventRecord)) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	var e store.EventRecord
	var task, run, from, to, reason, data sql.NullString
	for rows.Next() {
		if err := rows.Scan(&e.Seq, &e.At, &e.Kind, &task, &run, &from, &to, &reason, &data); err != nil {
			return err
		}
		e.TaskID, e.RunID, e.From, e.To, e.Reason, e.Data = task.String, run.String, from.String, to.String, reason.String, data.String
		fn(&e)
	}
	return rows.Err()
}

func (r reads) EventList(ctx context.Context, since int64, limit int, fn func(*store.EventRecord)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT `+eventCols+`
		FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, since, limit)
	return scanEvents(rows, err, fn)
}

func (r reads) EventListOfTask(ctx context.Context, taskID string, fn func(*store.EventRecord)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT `+eventCols+`
		FROM events WHERE task_id = ? ORDER BY seq`, taskID)
	return scanEvents(rows, err, fn)
}

func (r reads) EventLastSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := r.q.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&seq)
	return seq, err
}

// EventLastSeq counts the events this transaction added and has not
// written yet.
func (t *Tx) EventLastSeq(ctx context.Context) (int64, error) {
	if err := t.Flush(); err != nil {
		return 0, err
	}
	return t.reads.EventLastSeq(ctx)
}

func (t *Tx) EventCancelledTasks(ctx context.Context, seq int64) ([]string, error) {
	// The events still pending are among them.
	if err := t.Flush(); err != nil {
		return nil, err
	}
	return queryStrings(ctx, t, `SELECT task_id FROM events WHERE seq > ? AND kind = 'task.cancelled' ORDER BY seq`, seq)
}

// LastSeq is EventLastSeq on q (the pool or a transaction), for the
// domain code that still runs statements of its own.
func LastSeq(ctx context.Context, q querier) (int64, error) {
	return reads{q}.EventLastSeq(ctx)
}
