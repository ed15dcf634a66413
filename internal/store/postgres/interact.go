package postgres

import (
	"cmp"
	"context"
	"slices"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

const askColumns = `id, run_id, task_id, question, state, COALESCE(reason, ''), asked_at, COALESCE(expires_at, ''), COALESCE(answered_at, '')`

func scanAsks(rows pgx.Rows, err error) ([]store.Ask, error) {
	if err != nil {
		return nil, err
	}
	out := []store.Ask{}
	var a store.Ask
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.RunID, &a.TaskID, &a.Question, &a.State, &a.Reason, &a.AskedAt, &a.ExpiresAt, &a.AnsweredAt},
		func() error {
			out = append(out, a)
			return nil
		})
	return out, err
}

func (r *reads) AskGet(ctx context.Context, id int64) (*store.Ask, error) {
	as, err := scanAsks(r.q.Query(r.cx(ctx), `SELECT `+askColumns+` FROM asks WHERE id = $1`, id))
	if err != nil {
		return nil, err
	}
	if len(as) == 0 {
		return nil, store.ErrNotFound
	}
	return &as[0], nil
}

func (r *reads) AskListOpen(ctx context.Context) ([]store.Ask, error) {
	return scanAsks(r.q.Query(r.cx(ctx), `SELECT `+askColumns+` FROM asks WHERE state = 'open'
		AND run_id IN (SELECT id FROM runs WHERE state IN ('queued','running','cancelling')) ORDER BY id`))
}

func (r *reads) AskListOfTask(ctx context.Context, taskID string) ([]store.Ask, error) {
	return scanAsks(r.q.Query(r.cx(ctx), `SELECT `+askColumns+` FROM asks WHERE task_id = $1 ORDER BY id`, taskID))
}

const messageColumns = `id, task_id, body, sent_at, COALESCE(sent_run, ''), COALESCE(recv_run, ''), COALESCE(recv_at, '')`

func scanMessages(rows pgx.Rows, err error) ([]store.Message, error) {
	if err != nil {
		return nil, err
	}
	out := []store.Message{}
	var m store.Message
	_, err = pgx.ForEachRow(rows, []any{&m.ID, &m.TaskID, &m.Body, &m.SentAt, &m.SentRun, &m.RecvRun, &m.RecvAt},
		func() error {
			out = append(out, m)
			return nil
		})
	return out, err
}

func (r *reads) MessageListOfTask(ctx context.Context, taskID string) ([]store.Message, error) {
	return scanMessages(r.q.Query(r.cx(ctx), `SELECT `+messageColumns+` FROM messages WHERE task_id = $1 ORDER BY id`, taskID))
}

const progressColumns = `run_id, task_id, COALESCE(done, -1), COALESCE(total, -1), COALESCE(message, ''), at, COALESCE(event_at, ''), pending`

// progressColumnsOf is progressColumns of table alias a.
func progressColumnsOf(a string) string {
	return a + `.run_id, ` + a + `.task_id, COALESCE(` + a + `.done, -1), COALESCE(` + a + `.total, -1), COALESCE(` + a + `.message, ''), ` +
		a + `.at, COALESCE(` + a + `.event_at, ''), ` + a + `.pending`
}

func scanProgress(rows pgx.Rows, err error, fn func(p *store.RunProgress)) error {
	if err != nil {
		return err
	}
	var p store.RunProgress
	_, err = pgx.ForEachRow(rows, []any{&p.RunID, &p.TaskID, &p.Done, &p.Total, &p.Message, &p.At, &p.EventAt, &p.Pending},
		func() error {
			c := p
			fn(&c)
			return nil
		})
	return err
}

func (r *reads) RunProgressGet(ctx context.Context, runID string) (*store.RunProgress, error) {
	var out *store.RunProgress
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+progressColumns+` FROM run_progress WHERE run_id = $1`, runID)
	err = scanProgress(rows, err, func(p *store.RunProgress) { out = p })
	if err == nil && out == nil {
		err = store.ErrNotFound
	}
	return out, err
}

func (r *reads) RunProgressOfRuns(ctx context.Context, ids []string, fn func(p *store.RunProgress)) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+progressColumns+` FROM run_progress WHERE run_id = ANY($1::text[])`, ids)
	return scanProgress(rows, err, fn)
}

func (r *reads) RunProgressLive(ctx context.Context, fn func(p *store.RunProgress)) error {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+progressColumnsOf("p")+` FROM runs r JOIN run_progress p ON p.run_id = r.id
		WHERE r.state IN ('queued','running','cancelling')`)
	return scanProgress(rows, err, fn)
}

func (r *reads) RunProgressPendingList(ctx context.Context, before string, limit int) ([]store.RunProgress, error) {
	out := []store.RunProgress{}
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+progressColumns+` FROM run_progress
		WHERE pending AND (event_at IS NULL OR event_at <= $1) LIMIT $2`, before, limit)
	err = scanProgress(rows, err, func(p *store.RunProgress) { out = append(out, *p) })
	return out, err
}

func (tx *Tx) AskAdd(ctx context.Context, a store.Ask) (int64, error) {
	var id int64
	err := tx.ptx.QueryRow(tx.ctx, `INSERT INTO asks (run_id, task_id, question, state, asked_at, expires_at)
		VALUES ($1, $2, $3, 'open', $4, $5) RETURNING id`, a.RunID, a.TaskID, clean(a.Question), a.AskedAt, nullable(a.ExpiresAt)).Scan(&id)
	return id, err
}

func (tx *Tx) AskAnswer(ctx context.Context, a store.AskAnswer) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE asks SET state = $1, reason = $2, answered_at = $3 WHERE id = $4 AND state = 'open'`,
		a.To, nullable(a.Reason), a.At, a.ID)
	return err == nil && tag.RowsAffected() == 1, err
}

func (tx *Tx) AskDenyOpenOfRuns(ctx context.Context, ids []string, reason, at string) ([]store.Ask, error) {
	if len(ids) == 0 {
		return []store.Ask{}, nil
	}
	out, err := scanAsks(tx.ptx.Query(tx.ctx, `UPDATE asks SET state = 'denied', reason = $1, answered_at = $2
		WHERE state = 'open' AND run_id = ANY($3::text[]) RETURNING `+askColumns, nullable(reason), at, ids))
	if err != nil {
		return nil, err
	}
	// RETURNING gives no order.
	slices.SortFunc(out, func(a, b store.Ask) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (tx *Tx) MessageAdd(ctx context.Context, m store.Message) (int64, error) {
	var id int64
	err := tx.ptx.QueryRow(tx.ctx, `INSERT INTO messages (task_id, body, sent_at, sent_run) VALUES ($1, $2, $3, $4) RETURNING id`,
		m.TaskID, clean(m.Body), m.SentAt, nullable(m.SentRun)).Scan(&id)
	return id, err
}

func (tx *Tx) MessagesTake(ctx context.Context, taskID, runID, at string) ([]store.Message, error) {
	ms, err := scanMessages(tx.ptx.Query(tx.ctx, `UPDATE messages SET recv_run = $1, recv_at = $2
		WHERE task_id = $3 AND recv_at IS NULL RETURNING `+messageColumns, runID, at, taskID))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ms, func(a, b store.Message) int { return cmp.Compare(a.ID, b.ID) })
	return ms, nil
}

func (tx *Tx) RunProgressPut(ctx context.Context, p store.RunProgress) error {
	_, err := tx.ptx.Exec(tx.ctx, `INSERT INTO run_progress (run_id, task_id, done, total, message, at, event_at, pending)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (run_id) DO UPDATE SET task_id = excluded.task_id, done = excluded.done, total = excluded.total,
			message = excluded.message, at = excluded.at, event_at = excluded.event_at, pending = excluded.pending`,
		p.RunID, p.TaskID, optCount(p.Done), optCount(p.Total), nullable(p.Message), p.At, nullable(p.EventAt), p.Pending)
	return err
}

func (tx *Tx) RunProgressSettle(ctx context.Context, p store.RunProgress, eventAt string) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, `UPDATE run_progress SET pending = false, event_at = $1
		WHERE run_id = $2 AND pending AND done IS NOT DISTINCT FROM $3::bigint AND total IS NOT DISTINCT FROM $4::bigint
			AND message IS NOT DISTINCT FROM $5::text AND at = $6`,
		eventAt, p.RunID, optCount(p.Done), optCount(p.Total), nullable(p.Message), p.At)
	return err == nil && tag.RowsAffected() == 1, err
}

// optCount is a count as stored: NULL for none (below 0).
func optCount(n int64) any {
	if n < 0 {
		return nil
	}
	return n
}
