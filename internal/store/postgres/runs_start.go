package postgres

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
	"github.com/jackc/pgx/v5"
)

const (
	// sqlStartRun is one start: the CAS and the start in one statement.
	// GREATEST keeps the start no earlier than the creation (fixed-width
	// times compare as text).
	sqlStartRun = `UPDATE runs SET state = 'running', started_at = GREATEST(created_at, $1), pid = $2, pgid = $3
		WHERE id = $4 AND state = 'queued' AND lease_token = $5 RETURNING task_id`
	// sqlStartRuns is every start at once. v keeps, of the starts of one
	// run, the first under the run's token (the one a start per row
	// would apply), and its place in the list, which the row returned
	// names.
	sqlStartRuns = `WITH v AS (
			SELECT DISTINCT ON (s.rid) s.rid, s.at, s.pid, s.pgid, s.n
			FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int4[]) WITH ORDINALITY AS s(rid, tok, at, pid, pgid, n)
			JOIN runs ON runs.id = s.rid AND runs.lease_token = s.tok
			ORDER BY s.rid, s.n)
		UPDATE runs SET state = 'running', started_at = GREATEST(runs.created_at, v.at), pid = v.pid, pgid = v.pgid
		FROM v WHERE runs.id = v.rid AND runs.state = 'queued'
		RETURNING v.n, runs.task_id`
)

func (tx *Tx) RunStart(ctx context.Context, s store.RunStart) (string, error) {
	var taskID string
	err := tx.ptx.QueryRow(tx.ctx, sqlStartRun, s.At, int32(s.Pid), int32(s.Pgid), s.RunID, s.Token).Scan(&taskID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return taskID, err
}

// RunsStart moves every run with one UPDATE (a CAS on each).
func (tx *Tx) RunsStart(ctx context.Context, starts []store.RunStart) error {
	n := len(starts)
	if n == 0 {
		return nil
	}
	ids, tokens, ats := make([]string, n), make([]string, n), make([]string, n)
	pids, pgids := make([]int32, n), make([]int32, n)
	for i, s := range starts {
		ids[i], tokens[i], ats[i], pids[i], pgids[i] = s.RunID, s.Token, s.At, int32(s.Pid), int32(s.Pgid)
	}
	rows, err := tx.ptx.Query(tx.ctx, sqlStartRuns, ids, tokens, ats, pids, pgids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var at int64
		var task string
		if err := rows.Scan(&at, &task); err != nil {
			return err
		}
		if at >= 1 && at <= int64(n) {
			starts[at-1].TaskID = task
		}
	}
	return rows.Err()
}
