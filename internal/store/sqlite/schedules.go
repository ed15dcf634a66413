package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

const scheduleCols = `name, expr, tz, spec, catch_up, overlap, paused, last_slot, COALESCE(last_task, ''), created_at, updated_at`

func scanSchedule(sc interface{ Scan(...any) error }) (*store.Schedule, error) {
	var s store.Schedule
	err := sc.Scan(&s.Name, &s.Expr, &s.TZ, &s.Spec, &s.CatchUp, &s.Overlap, &s.Paused, &s.LastSlot, &s.LastTask, &s.CreatedAt, &s.UpdatedAt)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func (r reads) ScheduleGet(ctx context.Context, name string) (*store.Schedule, error) {
	s, err := scanSchedule(r.q.QueryRowContext(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return s, err
}

func (r reads) ScheduleList(ctx context.Context) ([]store.Schedule, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+scheduleCols+` FROM schedules ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// applied runs a write and reports whether it changed a row.
func (t *Tx) applied(ctx context.Context, query string, args ...any) (bool, error) {
	res, err := t.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t *Tx) ScheduleAdd(ctx context.Context, s store.Schedule) (bool, error) {
	return t.applied(ctx, `INSERT INTO schedules (name, expr, tz, spec, catch_up, overlap, paused, last_slot, last_task, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?) ON CONFLICT (name) DO NOTHING`,
		s.Name, s.Expr, s.TZ, s.Spec, s.CatchUp, s.Overlap, s.Paused, s.LastSlot, s.LastTask, s.CreatedAt, s.UpdatedAt)
}

func (t *Tx) ScheduleReplace(ctx context.Context, s store.Schedule) (bool, error) {
	return t.applied(ctx, `UPDATE schedules SET expr = ?, tz = ?, spec = ?, catch_up = ?, overlap = ?, last_slot = ?, updated_at = ?
		WHERE name = ?`, s.Expr, s.TZ, s.Spec, s.CatchUp, s.Overlap, s.LastSlot, s.UpdatedAt, s.Name)
}

func (t *Tx) ScheduleAdvance(ctx context.Context, name, from, to, task, at string) (bool, error) {
	return t.applied(ctx, `UPDATE schedules SET last_slot = ?, last_task = COALESCE(NULLIF(?, ''), last_task), updated_at = ?
		WHERE name = ? AND last_slot = ?`, to, task, at, name, from)
}

func (t *Tx) ScheduleSetPaused(ctx context.Context, name string, paused bool, at string) (bool, error) {
	return t.applied(ctx, `UPDATE schedules SET paused = ?, updated_at = ? WHERE name = ? AND paused <> ?`, paused, at, name, paused)
}

func (t *Tx) ScheduleSetLastTask(ctx context.Context, name, task, at string) (bool, error) {
	return t.applied(ctx, `UPDATE schedules SET last_task = ?, updated_at = ? WHERE name = ?`, task, at, name)
}

func (t *Tx) ScheduleDelete(ctx context.Context, name string) (bool, error) {
	return t.applied(ctx, `DELETE FROM schedules WHERE name = ?`, name)
}
