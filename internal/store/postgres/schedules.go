package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

const scheduleCols = `name, expr, tz, spec, catch_up, overlap, paused, last_slot, COALESCE(last_task, ''), created_at, updated_at`

func (r *reads) ScheduleGet(ctx context.Context, name string) (*store.Schedule, error) {
	var s store.Schedule
	err := r.q.QueryRow(r.cx(ctx), `SELECT `+scheduleCols+` FROM schedules WHERE name = $1`, name).Scan(
		&s.Name, &s.Expr, &s.TZ, &s.Spec, &s.CatchUp, &s.Overlap, &s.Paused, &s.LastSlot, &s.LastTask, &s.CreatedAt, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func (r *reads) ScheduleList(ctx context.Context) ([]store.Schedule, error) {
	rows, err := r.q.Query(r.cx(ctx), `SELECT `+scheduleCols+` FROM schedules ORDER BY name`)
	if err != nil {
		return nil, err
	}
	var out []store.Schedule
	var s store.Schedule
	_, err = pgx.ForEachRow(rows, []any{&s.Name, &s.Expr, &s.TZ, &s.Spec, &s.CatchUp, &s.Overlap, &s.Paused, &s.LastSlot, &s.LastTask, &s.CreatedAt, &s.UpdatedAt},
		func() error {
			out = append(out, s)
			return nil
		})
	return out, err
}

// applied runs a write and reports whether it changed a row.
func (tx *Tx) applied(query string, args ...any) (bool, error) {
	tag, err := tx.ptx.Exec(tx.ctx, query, args...)
	return err == nil && tag.RowsAffected() > 0, err
}

func (tx *Tx) ScheduleAdd(ctx context.Context, s store.Schedule) (bool, error) {
	return tx.applied(`INSERT INTO schedules (name, expr, tz, spec, catch_up, overlap, paused, last_slot, last_task, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (name) DO NOTHING`,
		s.Name, s.Expr, s.TZ, s.Spec, s.CatchUp, s.Overlap, s.Paused, s.LastSlot, nullable(s.LastTask), s.CreatedAt, s.UpdatedAt)
}

func (tx *Tx) ScheduleReplace(ctx context.Context, s store.Schedule) (bool, error) {
	return tx.applied(`UPDATE schedules SET expr = $1, tz = $2, spec = $3, catch_up = $4, overlap = $5, last_slot = $6, updated_at = $7
		WHERE name = $8`, s.Expr, s.TZ, s.Spec, s.CatchUp, s.Overlap, s.LastSlot, s.UpdatedAt, s.Name)
}

func (tx *Tx) ScheduleAdvance(ctx context.Context, name, from, to, task, at string) (bool, error) {
	return tx.applied(`UPDATE schedules SET last_slot = $1, last_task = COALESCE($2, last_task), updated_at = $3
		WHERE name = $4 AND last_slot = $5`, to, nullable(task), at, name, from)
}

func (tx *Tx) ScheduleSetPaused(ctx context.Context, name string, paused bool, at string) (bool, error) {
	return tx.applied(`UPDATE schedules SET paused = $1, updated_at = $2 WHERE name = $3 AND paused <> $1`, paused, at, name)
}

func (tx *Tx) ScheduleSetLastTask(ctx context.Context, name, task, at string) (bool, error) {
	return tx.applied(`UPDATE schedules SET last_task = $1, updated_at = $2 WHERE name = $3`, task, at, name)
}

func (tx *Tx) ScheduleDelete(ctx context.Context, name string) (bool, error) {
	return tx.applied(`DELETE FROM schedules WHERE name = $1`, name)
}
