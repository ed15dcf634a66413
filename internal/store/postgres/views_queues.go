package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

// Queue settings and their live counts.

// QueueListWithCounts counts each queue's backlog from tasks_state and
// its live runs from runs_live: both small reads of an index, exact
// whatever queues.running says between its recounts.
func (r *reads) QueueListWithCounts(ctx context.Context) ([]store.QueueCounts, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT q.name, q.paused, q.concurrency, q.retries, q.backoff_ms, q.transient_retries,
		q.timeout_retries, q.timeout_ms, q.start_timeout_ms, q.warn_after_ms, q.timeout_counts_asks,
		(SELECT count(*) FROM tasks t WHERE t.state = 'todo' AND t.queue = q.name),
		(SELECT count(*) FROM runs r WHERE r.state IN ('queued','running','cancelling') AND r.queue = q.name)
		FROM queues q ORDER BY q.name`)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.QueueCounts, error) {
		var q store.QueueCounts
		err := row.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
			&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks, &q.Backlog, &q.Running)
		return q, err
	})
	if out == nil && err == nil {
		out = []store.QueueCounts{}
	}
	return out, err
}

func (r *reads) QueueExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := r.q.QueryRow(r.cx(ctx), `SELECT EXISTS (SELECT 1 FROM queues WHERE name = $1)`, name).Scan(&ok)
	return ok, err
}

func (r *reads) QueueTimeouts(ctx context.Context, fn func(queue string, timeoutMS int64)) error {
	type timeout struct {
		name string
		ms   int64
	}
	rows, err := r.q.Query(r.cx(ctx), `SELECT name, timeout_ms FROM queues`)
	if err != nil {
		return err
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (timeout, error) {
		var t timeout
		err := row.Scan(&t.name, &t.ms)
		return t, err
	})
	if err != nil {
		return err
	}
	for _, t := range ts {
		fn(t.name, t.ms)
	}
	return nil
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

// QueueUpdate writes, and so locks the queue's row, only when a setting
// differs: an update that changes nothing leaves claims alone.
func (tx *Tx) QueueUpdate(ctx context.Context, u store.QueueUpdate) (bool, error) {
	args := []any{u.Name, u.At}
	var sets, differs []string
	for _, s := range queueSettings {
		if u.Set&s.bit == 0 {
			continue
		}
		args = append(args, s.val(&u))
		p := "$" + strconv.Itoa(len(args))
		sets = append(sets, s.col+" = "+p)
		differs = append(differs, s.col+" IS DISTINCT FROM "+p)
	}
	if len(sets) == 0 {
		return false, nil
	}
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE queues SET `+strings.Join(sets, ", ")+`, updated_at = $2
		WHERE name = $1 AND (`+strings.Join(differs, " OR ")+`)`, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}
