package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// Queue settings, their live counts, and the reads of a queue clear.

func (r reads) QueueListWithCounts(ctx context.Context) ([]store.QueueCounts, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT q.name, q.paused, q.concurrency, q.retries, q.backoff_ms, q.transient_retries,
		q.timeout_retries, q.timeout_ms, q.start_timeout_ms, q.warn_after_ms, q.timeout_counts_asks,
		(SELECT COUNT(*) FROM tasks t WHERE t.state = 'todo' AND t.queue = q.name),
		(SELECT COUNT(*) FROM runs r WHERE `+runsLive+` AND r.queue = q.name)
		FROM queues q ORDER BY q.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.QueueCounts{}
	for rows.Next() {
		var q store.QueueCounts
		if err := rows.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
			&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks, &q.Backlog, &q.Running); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

func (r reads) QueueExists(ctx context.Context, name string) (bool, error) {
	var n int
	err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM queues WHERE name = ?`, name).Scan(&n)
	return n > 0, err
}

func (r reads) QueueTimeouts(ctx context.Context, fn func(queue string, timeoutMS int64)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT name, timeout_ms FROM queues`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var name string
	var ms int64
	for rows.Next() {
		if err := rows.Scan(&name, &ms); err != nil {
			return err
		}
		fn(name, ms)
	}
	return rows.Err()
}

// queueSettings are the settings a QueueUpdate writes, in the order its
// statement names them.
var queueSettings = [...]struct {
	bit store.QueueFields
	col string
	val func(*store.QueueUpdate) any
}{
	{store.SetQueueConcurrency, "concurrency", func(u *store.QueueUpdate) any { return u.Concurrency }},
	{store.SetQueueRetries, "retries", func(u *store.QueueUpdate) any { return u.Retries }},
	{store.SetQueueBackoff, "backoff_ms", func(u *store.QueueUpdate) any { return u.BackoffMS }},
	{store.SetQueueTransientRetries, "transient_retries", func(u *store.QueueUpdate) any { return u.TransientRetries }},
	{store.SetQueueTimeoutRetries, "timeout_retries", func(u *store.QueueUpdate) any { return u.TimeoutRetries }},
	{store.SetQueueTimeout, "timeout_ms", func(u *store.QueueUpdate) any { return u.TimeoutMS }},
	{store.SetQueueStartTimeout, "start_timeout_ms", func(u *store.QueueUpdate) any { return u.StartTimeoutMS }},
	{store.SetQueueWarnAfter, "warn_after_ms", func(u *store.QueueUpdate) any { return u.WarnAfterMS }},
	{store.SetQueuePaused, "paused", func(u *store.QueueUpdate) any { return u.Paused }},
	{store.SetQueueTimeoutCountsAsks, "timeout_counts_asks", func(u *store.QueueUpdate) any { return u.TimeoutCountsAsks }},
}

func (t *Tx) QueueUpdate(ctx context.Context, u store.QueueUpdate) (bool, error) {
	var cols, differs []string
	var vals []any
	for _, s := range queueSettings {
		if u.Set&s.bit != 0 {
			cols = append(cols, s.col+" = ?")
			differs = append(differs, s.col+" IS NOT ?")
			vals = append(vals, s.val(&u))
		}
	}
	if len(cols) == 0 {
		return false, nil
	}
	// Only a queue whose settings change is updated: the values twice,
	// once to write and once to compare.
	args := append(append(append([]any{}, vals...), u.At, u.Name), vals...)
	res, err := t.ExecContext(ctx, `UPDATE queues SET `+strings.Join(cols, ", ")+`, updated_at = ? WHERE name = ? AND (`+
		strings.Join(differs, " OR ")+`)`, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (r reads) TaskLastPos(ctx context.Context) (int64, error) {
	// A task's position is its rowid.
	var upto sql.NullInt64
	err := r.q.QueryRowContext(ctx, `SELECT MAX(rowid) FROM tasks`).Scan(&upto)
	return upto.Int64, err
}

func (r reads) TaskClearable(ctx context.Context, s store.TaskClearScan) ([]string, int64, error) {
	// +queue, +state: read by rowid, never through tasks_state.
	rows, err := r.q.QueryContext(ctx, `SELECT rowid, id FROM tasks WHERE rowid > ? AND rowid <= ?
			AND +queue = ? AND +state IN ('inbox','todo','blocked') AND created_at <= ? ORDER BY rowid LIMIT ?`,
		s.After, s.Upto, s.Queue, s.CreatedBy, s.Limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var ids []string
	var last int64
	for rows.Next() {
		var id string
		if err := rows.Scan(&last, &id); err != nil {
			return nil, 0, err
		}
		ids = append(ids, id)
	}
	return ids, last, rows.Err()
}
