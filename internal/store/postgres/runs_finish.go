package postgres

import (
	"context"
	"slices"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5/pgtype"
)

const (
	// sqlEndRuns ends every run at once (a CAS on each). v keeps, of the
	// ends of one run, the first under the run's token; its columns are
	// named apart from runs' so that runViewCols name runs' own.
	// GREATEST skips a NULL start.
	sqlEndRuns = `WITH v AS (
			SELECT DISTINCT ON (e.rid) e.rid, e.ended, e.clamp, e.code, e.sig, e.err
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::int4[], $6::text[], $7::text[])
				WITH ORDINALITY AS e(rid, tok, ended, clamp, code, sig, err, n)
			JOIN runs ON runs.id = e.rid AND runs.lease_token = e.tok
			ORDER BY e.rid, e.n)
		UPDATE runs SET state = 'succeeded',
			ended_at = CASE WHEN v.clamp THEN GREATEST(v.ended, runs.created_at, runs.started_at) ELSE v.ended END,
			exit_code = v.code, signal = NULLIF(v.sig, ''), error = NULLIF(v.err, '')
		FROM v WHERE runs.id = v.rid AND runs.state = 'running'
		RETURNING ` + runViewCols
	// sqlDoneTasks moves the tasks doing → done (a CAS on each).
	sqlDoneTasks = `UPDATE tasks SET state = 'done', updated_at = $1, lane_head = false, blocked_reason = NULL,
			finished_at = $1, reason = NULL
		WHERE id = ANY($2::text[]) AND state = 'doing'
		RETURNING id, COALESCE(key, '')`
	// sqlDependedOn reads which of the tasks some task depends on.
	sqlDependedOn = `SELECT DISTINCT dep_id FROM task_deps WHERE dep_id = ANY($1::text[])`
)

// RunsSucceed ends the runs with one UPDATE, which returns them as cq
// shows them.
func (tx *Tx) RunsSucceed(ctx context.Context, ends []store.RunEnd) ([]store.RunView, error) {
	n := len(ends)
	if n == 0 {
		return nil, nil
	}
	ids, tokens, ended, sigs, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	clamps, codes := make([]bool, n), make([]pgtype.Int4, n)
	for i, e := range ends {
		ids[i], tokens[i], ended[i], clamps[i] = e.RunID, e.Token, e.EndedAt, e.Clamp
		sigs[i], errs[i] = clean(e.Signal), clean(e.Error)
		if e.ExitCode != nil {
			codes[i] = pgtype.Int4{Int32: int32(*e.ExitCode), Valid: true}
		}
	}
	rows, err := tx.ptx.Query(tx.ctx, sqlEndRuns, ids, tokens, ended, clamps, codes, sigs, errs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]store.RunView, 0, n)
	for rows.Next() {
		out = append(out, store.RunView{})
		if err := scanRunView(rows, &out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// TasksDone moves the tasks with one UPDATE (a CAS on each), then tells
// which have dependents under their task locks (taken after the task rows,
// as the end of one task takes them): an enqueue counting one of them as
// a dependency not yet done either committed its dependency row before,
// and it is seen here, or waits for this transaction and sees the task
// done. Read without the locks, a dependent enqueued at the same time
// would be missed, and wait for ever.
func (tx *Tx) TasksDone(ctx context.Context, at string, ids []string) (map[string]store.DoneTask, error) {
	out := make(map[string]store.DoneTask, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.ptx.Query(tx.ctx, sqlDoneTasks, at, ids)
	if err != nil {
		return nil, err
	}
	moved := make([]string, 0, len(ids))
	for rows.Next() {
		var id string
		var d store.DoneTask
		if err := rows.Scan(&id, &d.Key); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = d
		moved = append(moved, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(moved) == 0 {
		return out, nil
	}
	slices.Sort(moved)
	if err := tx.lockTasks(moved); err != nil {
		return nil, err
	}
	deps, err := queryStrings(tx.ctx, tx.ptx, sqlDependedOn, moved)
	if err != nil {
		return nil, err
	}
	for _, id := range deps {
		d := out[id]
		d.Dependents = true
		out[id] = d
	}
	return out, nil
}
