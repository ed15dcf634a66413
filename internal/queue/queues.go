package queue

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Queue is a queue's settings and live counts as cq prints them.
type Queue struct {
	Name             string  `json:"name"`
	Paused           bool    `json:"paused"`
	Concurrency      int     `json:"concurrency"`
	Retries          int     `json:"retries"`
	Backoff          string  `json:"backoff"`
	TransientRetries int     `json:"transient_retries"`
	TimeoutRetries   int     `json:"timeout_retries"`
	Timeout          *string `json:"timeout"` // null: no run time limit
	StartTimeout     string  `json:"start_timeout"`
	WarnAfter        string  `json:"warn_after"`
	Backlog          int     `json:"backlog"`
	Running          int     `json:"running"`
}

// QueueSettings are the settable fields of a queue; nil leaves a field as
// it is.
type QueueSettings struct {
	Concurrency      *int
	Retries          *int
	Backoff          *time.Duration
	TransientRetries *int
	TimeoutRetries   *int
	Timeout          *time.Duration
	StartTimeout     *time.Duration
	WarnAfter        *time.Duration
	Paused           *bool
}

func msString(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// Queues lists every queue with its backlog (todo tasks) and running count.
func (s *Store) Queues(ctx context.Context) ([]Queue, error) {
	return queuesWithCounts(ctx, s.DB.SQL)
}

func queuesWithCounts(ctx context.Context, on querier) ([]Queue, error) {
	rows, err := on.QueryContext(ctx, `SELECT q.name, q.paused, q.concurrency, q.retries, q.backoff_ms, q.transient_retries,
		q.timeout_retries, q.timeout_ms, q.start_timeout_ms, q.warn_after_ms,
		(SELECT COUNT(*) FROM tasks t WHERE t.state = 'todo' AND t.queue = q.name),
		(SELECT COUNT(*) FROM runs r WHERE `+liveRuns+` AND r.queue = q.name)
		FROM queues q ORDER BY q.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Queue{}
	for rows.Next() {
		var q Queue
		var backoff, timeout, start, warn int64
		if err := rows.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &backoff, &q.TransientRetries, &q.TimeoutRetries,
			&timeout, &start, &warn, &q.Backlog, &q.Running); err != nil {
			return nil, err
		}
		q.Backoff, q.StartTimeout, q.WarnAfter = msString(backoff), msString(start), msString(warn)
		if timeout > 0 {
			t := msString(timeout)
			q.Timeout = &t
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// SetQueue creates the queue if needed and applies the given settings, in
// one transaction with a queue.updated event.
func (s *Store) SetQueue(ctx context.Context, name string, set QueueSettings) error {
	if !ValidQueueName(name) {
		return invalidf("invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", name)
	}
	var cols []string
	var args []any
	data := map[string]any{}
	addInt := func(col, field string, v *int) error {
		if v == nil {
			return nil
		}
		if *v < 0 {
			return invalidf("--%s must be 0 or more", strings.ReplaceAll(field, "_", "-"))
		}
		cols, args = append(cols, col+" = ?"), append(args, *v)
		data[field] = *v
		return nil
	}
	addDur := func(col, field string, v *time.Duration, allowZero bool) error {
		if v == nil {
			return nil
		}
		if *v < 0 || (!allowZero && *v == 0) {
			return invalidf("--%s must be positive", strings.ReplaceAll(field, "_", "-"))
		}
		cols, args = append(cols, col+" = ?"), append(args, v.Milliseconds())
		data[field] = v.String()
		return nil
	}
	for _, err := range []error{
		addInt("concurrency", "concurrency", set.Concurrency),
		addInt("retries", "retries", set.Retries),
		addDur("backoff_ms", "backoff", set.Backoff, false),
		addInt("transient_retries", "transient_retries", set.TransientRetries),
		addInt("timeout_retries", "timeout_retries", set.TimeoutRetries),
		addDur("timeout_ms", "timeout", set.Timeout, true),
		addDur("start_timeout_ms", "start_timeout", set.StartTimeout, false),
		addDur("warn_after_ms", "warn_after", set.WarnAfter, false),
	} {
		if err != nil {
			return err
		}
	}
	kind := "queue.updated"
	if set.Paused != nil {
		cols, args = append(cols, "paused = ?"), append(args, *set.Paused)
		kind = "queue.resumed"
		if *set.Paused {
			kind = "queue.paused"
		}
	}
	return s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		if err := ensureQueue(ctx, tx, now, name); err != nil {
			return err
		}
		if len(cols) == 0 {
			// No setting given: the queue exists now, nothing changed.
			return nil
		}
		// Only a queue whose settings change is updated, and only a change
		// is recorded: pausing a paused queue, resuming a running one or
		// setting what is already set records nothing.
		differs := make([]string, len(cols))
		for i, c := range cols {
			differs[i] = strings.TrimSuffix(c, " = ?") + " IS NOT ?"
		}
		a := append(append(append([]any{}, args...), FormatTime(now), name), args...)
		res, err := tx.ExecContext(ctx, `UPDATE queues SET `+strings.Join(cols, ", ")+`, updated_at = ? WHERE name = ? AND (`+
			strings.Join(differs, " OR ")+`)`, a...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		data["queue"] = name
		return addEvent(ctx, tx, now, event{Kind: kind, Data: data})
	})
}

// ClearQueueStart checks that the queue exists and returns the rowid
// bound of a clear: the tasks stored when it began (ClearQueueStep never
// goes past it, so producers adding to the queue cannot keep a clear
// going forever).
func (s *Store) ClearQueueStart(ctx context.Context, name string) (ClearBound, error) {
	var b ClearBound
	if !ValidQueueName(name) {
		return b, invalidf("invalid queue name %q", name)
	}
	var exists int
	if err := s.DB.SQL.QueryRowContext(ctx, `SELECT COUNT(*) FROM queues WHERE name = ?`, name).Scan(&exists); err != nil {
		return b, err
	}
	if exists == 0 {
		return b, notFoundf("no queue %q", name)
	}
	b.Began = FormatTime(s.now())
	var upto sql.NullInt64
	if err := s.DB.SQL.QueryRowContext(ctx, `SELECT MAX(rowid) FROM tasks`).Scan(&upto); err != nil {
		return b, err
	}
	b.Upto = upto.Int64
	return b, nil
}

// ClearBound is where a queue clear stops: the rowids stored when it
// began, and among them only tasks created by then (a rowid freed by a
// cleanup since may be taken by a new task).
type ClearBound struct {
	Upto  int64
	Began string
}

// clearWindow bounds how many rows one ClearQueueStep reads, so that a
// step holds the write lock briefly even where the queue's tasks are few
// among many.
const clearWindow = 20000

// ClearQueueStep cancels, in one transaction, up to limit tasks of the
// queue that are inbox, todo or blocked, with their dependents, reading
// the tasks after rowid after in rowid order (up to clearWindow of them,
// and never past the bound). It returns the tasks it cancelled,
// dependents included (their ids, in the order they were cancelled),
// and the rowid to go on after, 0 when it reached
// the bound. A clear is a series of such
// steps, so that other writers get the lock between them (see
// maintenance.ClearQueue); a task that starts meanwhile keeps running.
func (s *Store) ClearQueueStep(ctx context.Context, name string, after int64, bound ClearBound, limit int) ([]string, int64, error) {
	var cancelled []string
	next := int64(0)
	upto := bound.Upto
	end := min(after+clearWindow, upto)
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		cancelled, next = nil, 0
		seq0, err := lastSeq(ctx, tx)
		if err != nil {
			return err
		}
		// +queue, +state: read by rowid, never through tasks_state.
		rows, err := tx.QueryContext(ctx, `SELECT rowid, id FROM tasks WHERE rowid > ? AND rowid <= ?
			AND +queue = ? AND +state IN ('inbox','todo','blocked') AND created_at <= ? ORDER BY rowid LIMIT ?`, after, end, name, bound.Began, limit)
		if err != nil {
			return err
		}
		var ids []string
		var last int64
		for rows.Next() {
			var id string
			if err := rows.Scan(&last, &id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			// Re-read: an earlier cancel may have cancelled it as a dependent.
			t, err := getTask(ctx, tx, id)
			if err != nil {
				return err
			}
			if TaskTerminal(t.State) || t.State == TaskDoing {
				continue
			}
			if err := cancelTask(ctx, tx, now, t, "queue "+name+" cleared"); err != nil {
				return err
			}
		}
		// Read from the events: a cancel takes its dependents with it,
		// in this queue or another.
		if err := tx.Flush(); err != nil {
			return err
		}
		cancelled, err = queryIDs(ctx, tx, `SELECT task_id FROM events WHERE seq > ? AND kind = 'task.cancelled' ORDER BY seq`, seq0)
		if err != nil {
			return err
		}
		switch {
		case len(ids) == limit:
			next = last
		case end < upto:
			next = end
		}
		return nil
	})
	return cancelled, next, err
}
