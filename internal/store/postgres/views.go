package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// The statements of store.ViewReader and store.ViewWriter: this file holds
// the snapshot, runs as shown, events and system state; views_list.go the
// task listings, views_queues.go the queues and views_workers.go the
// workers.

// Snapshot over the pool reads in a REPEATABLE READ transaction of its
// own: every statement of it sees the state of its first.
func (r *reads) Snapshot(ctx context.Context, fn func(store.Reader) error) error {
	p, ok := r.q.(poolReads)
	if r.tx != nil || !ok {
		// A write transaction reads its own state; a snapshot is one
		// already.
		return fn(r)
	}
	var ptx pgx.Tx
	err := retryRead(ctx, func() error {
		var err error
		ptx, err = p.p.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		return err
	})
	if err != nil {
		return err
	}
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(&reads{q: ptx})
}

// SystemStateGet takes the key's lock in a transaction: the writers that
// read a value to write it back (the sweep's windows, the safety nets'
// places) take turns instead of losing each other's change.
func (r *reads) SystemStateGet(ctx context.Context, key string) (string, bool, error) {
	if r.tx != nil {
		if err := r.tx.lock(ctx, "state", key); err != nil {
			return "", false, err
		}
	}
	var v string
	err := r.q.QueryRow(r.cx(ctx), `SELECT value FROM system_state WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}

// runViewCols are the columns scanRunView reads, in its order.
const runViewCols = `id, task_id, attempt, state, exit_code, COALESCE(signal,''), COALESCE(worker,''), COALESCE(started_at,''),
	COALESCE(ended_at,''), COALESCE(error,''), COALESCE(reason,''), created_at`

// scanRunView reads a row of runViewCols into v.
func scanRunView(sc pgx.Row, v *store.RunView) error {
	var exit *int32
	if err := sc.Scan(&v.ID, &v.TaskID, &v.Attempt, &v.State, &exit, &v.Signal, &v.Worker, &v.StartedAt, &v.EndedAt,
		&v.Error, &v.Reason, &v.CreatedAt); err != nil {
		return err
	}
	v.ExitCode = nil
	if exit != nil {
		n := int(*exit)
		v.ExitCode = &n
	}
	return nil
}

func (r *reads) RunViewGet(ctx context.Context, id string) (*store.RunView, error) {
	var v store.RunView
	err := scanRunView(r.q.QueryRow(r.cx(ctx), `SELECT `+runViewCols+` FROM runs WHERE id = $1`, id), &v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (r *reads) RunViewList(ctx context.Context, taskID string) ([]store.RunView, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+runViewCols+` FROM runs WHERE task_id = $1 ORDER BY attempt`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.RunView{}
	for rows.Next() {
		var v store.RunView
		if err := scanRunView(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// RunCancellingIDs is polled by every worker: its condition implies
// runs_live's, so it reads that small index.
func (r *reads) RunCancellingIDs(ctx context.Context, worker string) ([]string, error) {
	ids, err := queryStrings(r.cx(ctx), r.q, `SELECT id FROM runs
		WHERE state IN ('queued','running','cancelling') AND state = 'cancelling' AND worker = $1`, worker)
	if ids == nil && err == nil {
		ids = []string{}
	}
	return ids, err
}

func (r *reads) RunEndedCounts(ctx context.Context, since string, fn func(state string, n int)) error {
	return r.viewCounts(ctx, fn, `SELECT state, count(*) FROM runs WHERE ended_at IS NOT NULL AND ended_at >= $1
		AND NOT probe GROUP BY state`, since)
}

// RunEndedAvgSeconds reads the stored times as timestamps: cq's format is
// RFC 3339, which PostgreSQL parses.
func (r *reads) RunEndedAvgSeconds(ctx context.Context, since string) (float64, bool, error) {
	var avg *float64
	err := r.q.QueryRow(r.cx(ctx), `SELECT avg(extract(epoch FROM ended_at::timestamptz - started_at::timestamptz))::float8
		FROM runs WHERE ended_at IS NOT NULL AND ended_at >= $1 AND started_at IS NOT NULL AND NOT probe`, since).Scan(&avg)
	if err != nil || avg == nil {
		return 0, false, err
	}
	return *avg, true, nil
}

// viewCounts calls fn with each (text, count) row of a query, once the
// rows are read.
func (r *reads) viewCounts(ctx context.Context, fn func(string, int), sql string, args ...any) error {
	type count struct {
		k string
		n int
	}
	rows, err := r.q.Query(r.cx(ctx), sql, args...)
	if err != nil {
		return err
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (count, error) {
		var c count
		err := row.Scan(&c.k, &c.n)
		return c, err
	})
	if err != nil {
		return err
	}
	for _, c := range cs {
		fn(c.k, c.n)
	}
	return nil
}

// eventCols are the columns of an events row as an EventRecord, NULL read
// as "".
const eventCols = `seq, at, kind, COALESCE(task_id,''), COALESCE(run_id,''), COALESCE(from_state,''), COALESCE(to_state,''),
	COALESCE(reason,''), COALESCE(data,'')`

// eventPage bounds the events read into memory at a time.
const eventPage = 1000

// readEvents reads the rows of a query of eventCols.
func (r *reads) readEvents(ctx context.Context, sql string, args ...any) ([]store.EventRecord, error) {
	rows, err := r.q.Query(r.cx(ctx), sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.EventRecord, error) {
		var e store.EventRecord
		err := row.Scan(&e.Seq, &e.At, &e.Kind, &e.TaskID, &e.RunID, &e.From, &e.To, &e.Reason, &e.Data)
		return e, err
	})
}

// EventList reads by pages of seq: a follower asking for many events holds
// a page in memory at a time.
func (r *reads) EventList(ctx context.Context, since int64, limit int, fn func(e *store.EventRecord)) error {
	for limit != 0 {
		n := eventPage
		if limit > 0 {
			n = min(n, limit)
		}
		evs, err := r.readEvents(ctx, `SELECT `+eventCols+` FROM events WHERE seq > $1 ORDER BY seq LIMIT $2`, since, n)
		if err != nil {
			return err
		}
		for i := range evs {
			fn(&evs[i])
		}
		if len(evs) < n {
			return nil
		}
		since = evs[len(evs)-1].Seq
		if limit > 0 {
			limit -= len(evs)
		}
	}
	return nil
}

// EventListOfTask reads the log from the task's task.created event on
// (found through events_task_ends; from the start for a task without
// one): no index holds every event of a task.
func (r *reads) EventListOfTask(ctx context.Context, taskID string, fn func(e *store.EventRecord)) error {
	evs, err := r.readEvents(ctx, `SELECT `+eventCols+` FROM events
		WHERE seq >= COALESCE((SELECT min(seq) FROM events WHERE task_id = $1
				AND kind IN ('task.created','task.done','task.failed','task.cancelled') AND kind = 'task.created'), 0)
			AND task_id = $1
		ORDER BY seq`, taskID)
	if err != nil {
		return err
	}
	for i := range evs {
		fn(&evs[i])
	}
	return nil
}
