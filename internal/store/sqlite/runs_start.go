package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// sqlStartRun is one start: the CAS and the start in one statement.
// Fixed-width times compare as text.
const sqlStartRun = `UPDATE runs SET state = 'running', started_at = MAX(created_at, ?), pid = ?, pgid = ?
		WHERE id = ? AND state = 'queued' AND lease_token = ? RETURNING task_id`

// startRunsSQL: k starts, 5 values each (run id, token, start time, pid,
// pgid). The +state keeps the planner on the runs' ids.
var startRunsSQL = newSQLByCount(func(k int) string {
	return `WITH v (id, token, at, pid, pgid) AS (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?),", k), ",") + `)
			UPDATE runs SET state = 'running', started_at = MAX(runs.created_at, v.at), pid = v.pid, pgid = v.pgid
			FROM v WHERE runs.id = v.id AND +runs.state = 'queued' AND runs.lease_token = v.token
			RETURNING runs.id, runs.task_id`
})

func (t *Tx) RunStart(ctx context.Context, s store.RunStart) (string, error) {
	var taskID string
	err := t.QueryRowContext(ctx, sqlStartRun, s.At, s.Pid, s.Pgid, s.RunID, s.Token).Scan(&taskID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return taskID, err
}

// RunsStart moves every run with one UPDATE per chunk (a CAS on each).
func (t *Tx) RunsStart(ctx context.Context, starts []store.RunStart) error {
	return inChunks(len(starts), func(lo, hi int) error {
		chunk := starts[lo:hi]
		args := make([]any, 0, 5*len(chunk))
		for _, s := range chunk {
			args = append(args, s.RunID, s.Token, s.At, s.Pid, s.Pgid)
		}
		rows, err := t.QueryContext(ctx, startRunsSQL.get(len(chunk)), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, task string
			if err := rows.Scan(&id, &task); err != nil {
				return err
			}
			// RETURNING comes in no set order: each row goes to the
			// first start of its run, looked for in the chunk (at most
			// maxChunk starts; a map would cost allocations).
			for i := range chunk {
				if chunk[i].RunID == id && chunk[i].TaskID == "" {
					chunk[i].TaskID = task
					break
				}
			}
		}
		return rows.Err()
	})
}
