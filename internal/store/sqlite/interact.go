package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"slices"

	"github.com/cq-dev/cq/internal/store"
)

const askColumns = `id, run_id, task_id, question, state, COALESCE(reason, ''), asked_at, COALESCE(expires_at, ''), COALESCE(answered_at, '')`

func scanAsks(rows *sql.Rows, err error) ([]store.Ask, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Ask{}
	for rows.Next() {
		var a store.Ask
		if err := rows.Scan(&a.ID, &a.RunID, &a.TaskID, &a.Question, &a.State, &a.Reason, &a.AskedAt, &a.ExpiresAt, &a.AnsweredAt); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (r reads) AskGet(ctx context.Context, id int64) (*store.Ask, error) {
	as, err := scanAsks(r.q.QueryContext(ctx, `SELECT `+askColumns+` FROM asks WHERE id = ?`, id))
	if err != nil {
		return nil, err
	}
	if len(as) == 0 {
		return nil, store.ErrNotFound
	}
	return &as[0], nil
}

func (r reads) AskListOpen(ctx context.Context) ([]store.Ask, error) {
	return scanAsks(r.q.QueryContext(ctx, `SELECT `+askColumns+` FROM asks WHERE state = 'open'
		AND run_id IN (SELECT id FROM runs WHERE state IN ('queued','running','cancelling')) ORDER BY id`))
}

func (r reads) AskListOfTask(ctx context.Context, taskID string) ([]store.Ask, error) {
	return scanAsks(r.q.QueryContext(ctx, `SELECT `+askColumns+` FROM asks WHERE task_id = ? ORDER BY id`, taskID))
}

func (r reads) MessageListOfTask(ctx context.Context, taskID string) ([]store.Message, error) {
	return scanMessages(r.q.QueryContext(ctx, `SELECT `+messageColumns+` FROM messages WHERE task_id = ? ORDER BY id`, taskID))
}

const messageColumns = `id, task_id, body, sent_at, COALESCE(sent_run, ''), COALESCE(recv_run, ''), COALESCE(recv_at, '')`

func scanMessages(rows *sql.Rows, err error) ([]store.Message, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Message{}
	for rows.Next() {
		var m store.Message
		if err := rows.Scan(&m.ID, &m.TaskID, &m.Body, &m.SentAt, &m.SentRun, &m.RecvRun, &m.RecvAt); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

const progressColumns = `run_id, task_id, COALESCE(done, -1), COALESCE(total, -1), COALESCE(message, ''), at, COALESCE(event_at, ''), pending`

// progressColumnsOf is progressColumns of table alias a.
func progressColumnsOf(a string) string {
	return a + `.run_id, ` + a + `.task_id, COALESCE(` + a + `.done, -1), COALESCE(` + a + `.total, -1), COALESCE(` + a + `.message, ''), ` +
		a + `.at, COALESCE(` + a + `.event_at, ''), ` + a + `.pending`
}

func scanProgress(rows *sql.Rows, err error, fn func(p *store.RunProgress)) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p store.RunProgress
		if err := rows.Scan(&p.RunID, &p.TaskID, &p.Done, &p.Total, &p.Message, &p.At, &p.EventAt, &p.Pending); err != nil {
			return err
		}
		fn(&p)
	}
	return rows.Err()
}

func (r reads) RunProgressGet(ctx context.Context, runID string) (*store.RunProgress, error) {
	var out *store.RunProgress
	rows, err := r.q.QueryContext(ctx, `SELECT `+progressColumns+` FROM run_progress WHERE run_id = ?`, runID)
	err = scanProgress(rows, err, func(p *store.RunProgress) { out = p })
	if err == nil && out == nil {
		err = store.ErrNotFound
	}
	return out, err
}

func (r reads) RunProgressOfRuns(ctx context.Context, ids []string, fn func(p *store.RunProgress)) error {
	for len(ids) > 0 {
		n := min(len(ids), 500)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		rows, err := r.q.QueryContext(ctx, `SELECT `+progressColumns+` FROM run_progress WHERE run_id IN `+inList(n), args...)
		if err := scanProgress(rows, err, fn); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func (r reads) RunProgressLive(ctx context.Context, fn func(p *store.RunProgress)) error {
	rows, err := r.q.QueryContext(ctx, `SELECT `+progressColumnsOf("p")+` FROM runs r JOIN run_progress p ON p.run_id = r.id
		WHERE r.state IN ('queued','running','cancelling')`)
	return scanProgress(rows, err, fn)
}

func (r reads) RunProgressPendingList(ctx context.Context, before string, limit int) ([]store.RunProgress, error) {
	out := []store.RunProgress{}
	rows, err := r.q.QueryContext(ctx, `SELECT `+progressColumns+` FROM run_progress
		WHERE pending AND (event_at IS NULL OR event_at <= ?) LIMIT ?`, before, limit)
	err = scanProgress(rows, err, func(p *store.RunProgress) { out = append(out, *p) })
	return out, err
}

func (t *Tx) AskAdd(ctx context.Context, a store.Ask) (int64, error) {
	if err := t.Flush(); err != nil {
		return 0, err
	}
	var id int64
	err := t.QueryRowContext(ctx, `INSERT INTO asks (run_id, task_id, question, state, asked_at, expires_at)
		VALUES (?, ?, ?, 'open', ?, ?) RETURNING id`, a.RunID, a.TaskID, a.Question, a.AskedAt, nullable(a.ExpiresAt)).Scan(&id)
	return id, err
}

func (t *Tx) AskAnswer(ctx context.Context, a store.AskAnswer) (bool, error) {
	if err := t.Flush(); err != nil {
		return false, err
	}
	res, err := t.ExecContext(ctx, `UPDATE asks SET state = ?, reason = ?, answered_at = ? WHERE id = ? AND state = 'open'`,
		a.To, nullable(a.Reason), a.At, a.ID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (t *Tx) AskDenyOpenOfRuns(ctx context.Context, ids []string, reason, at string) ([]store.Ask, error) {
	if err := t.Flush(); err != nil {
		return nil, err
	}
	out := []store.Ask{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		args := []any{nullable(reason), at}
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		as, err := scanAsks(t.QueryContext(ctx, `UPDATE asks SET state = 'denied', reason = ?, answered_at = ?
			WHERE state = 'open' AND run_id IN `+inList(n)+` RETURNING `+askColumns, args...))
		if err != nil {
			return nil, err
		}
		out = append(out, as...)
		ids = ids[n:]
	}
	// RETURNING gives no order.
	slices.SortFunc(out, func(a, b store.Ask) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (t *Tx) MessageAdd(ctx context.Context, m store.Message) (int64, error) {
	if err := t.Flush(); err != nil {
		return 0, err
	}
	var id int64
	err := t.QueryRowContext(ctx, `INSERT INTO messages (task_id, body, sent_at, sent_run) VALUES (?, ?, ?, ?) RETURNING id`,
		m.TaskID, m.Body, m.SentAt, nullable(m.SentRun)).Scan(&id)
	return id, err
}

func (t *Tx) MessagesTake(ctx context.Context, taskID, runID, at string) ([]store.Message, error) {
	if err := t.Flush(); err != nil {
		return nil, err
	}
	ms, err := scanMessages(t.QueryContext(ctx, `UPDATE messages SET recv_run = ?, recv_at = ?
		WHERE task_id = ? AND recv_at IS NULL RETURNING `+messageColumns, runID, at, taskID))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ms, func(a, b store.Message) int { return cmp.Compare(a.ID, b.ID) })
	return ms, nil
}

func (t *Tx) RunProgressPut(ctx context.Context, p store.RunProgress) error {
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := t.ExecContext(ctx, `INSERT INTO run_progress (run_id, task_id, done, total, message, at, event_at, pending)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET task_id = excluded.task_id, done = excluded.done, total = excluded.total,
			message = excluded.message, at = excluded.at, event_at = excluded.event_at, pending = excluded.pending`,
		p.RunID, p.TaskID, optCount(p.Done), optCount(p.Total), nullable(p.Message), p.At, nullable(p.EventAt), p.Pending)
	return err
}

func (t *Tx) RunProgressSettle(ctx context.Context, p store.RunProgress, eventAt string) (bool, error) {
	if err := t.Flush(); err != nil {
		return false, err
	}
	res, err := t.ExecContext(ctx, `UPDATE run_progress SET pending = 0, event_at = ?
		WHERE run_id = ? AND pending AND done IS ? AND total IS ? AND message IS ? AND at = ?`,
		eventAt, p.RunID, optCount(p.Done), optCount(p.Total), nullable(p.Message), p.At)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// optCount is a count as stored: NULL for none (below 0).
func optCount(n int64) any {
	if n < 0 {
		return nil
	}
	return n
}
