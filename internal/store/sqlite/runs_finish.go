package sqlite

import (
	"context"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// The batched statements of the ends of runs, for k rows: built once per k.
var (
	// endRunsSQL: k successful ends, 7 values each (run id, token, end
	// time, whether to keep the end after the run's creation and start,
	// exit code, signal, error). The +state keeps the planner on the
	// runs' ids.
	endRunsSQL = newSQLByCount(func(k int) string {
		return `WITH v (id, token, ended, clamp, exit, sig, err) AS (VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?),", k), ",") + `)
			UPDATE runs SET state = 'succeeded',
				ended_at = CASE WHEN v.clamp THEN MAX(v.ended, runs.created_at, COALESCE(runs.started_at, '')) ELSE v.ended END,
				exit_code = v.exit, signal = v.sig, error = v.err
			FROM v WHERE runs.id = v.id AND +runs.state = 'running' AND runs.lease_token = v.token
			RETURNING ` + qualified("runs", RunViewCols)
	})
	// doneTasksSQL: k tasks doing → done; ?1 and ?2 are the time.
	doneTasksSQL = newSQLByCount(func(k int) string {
		return `UPDATE tasks SET state = 'done', updated_at = ?, lane_head = 0, blocked_reason = NULL, finished_at = ?, reason = NULL
			WHERE id IN (` + strings.TrimSuffix(strings.Repeat("CAST(? AS TEXT),", k), ",") + `) AND +state = 'doing'
			RETURNING id, COALESCE(key, ''), EXISTS (SELECT 1 FROM task_deps WHERE dep_id = tasks.id)`
	})
)

// RunsSucceed ends the runs with one UPDATE per chunk (a CAS on each),
// which returns them as cq shows them.
func (t *Tx) RunsSucceed(ctx context.Context, ends []store.RunEnd) ([]store.RunView, error) {
	args := make([]any, 0, 7*len(ends))
	for _, e := range ends {
		clamp := 0
		if e.Clamp {
			clamp = 1
		}
		var exit any
		if e.ExitCode != nil {
			exit = *e.ExitCode
		}
		args = append(args, e.RunID, e.Token, e.EndedAt, clamp, exit, nullable(e.Signal), nullable(e.Error))
	}
	out := make([]store.RunView, 0, len(ends))
	err := inChunks(len(ends), func(lo, hi int) error {
		rows, err := t.QueryContext(ctx, endRunsSQL.get(hi-lo), args[7*lo:7*hi]...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			out = append(out, store.RunView{})
			if err := ScanRunView(rows, &out[len(out)-1]); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return out, err
}

// TasksDone moves the tasks with one UPDATE per chunk (a CAS on each).
func (t *Tx) TasksDone(ctx context.Context, at string, ids []string) (map[string]store.DoneTask, error) {
	out := make(map[string]store.DoneTask, len(ids))
	err := inChunks(len(ids), func(lo, hi int) error {
		args := make([]any, 0, 2+hi-lo)
		args = append(args, at, at)
		for _, id := range ids[lo:hi] {
			args = append(args, id)
		}
		rows, err := t.QueryContext(ctx, doneTasksSQL.get(hi-lo), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var d store.DoneTask
			if err := rows.Scan(&id, &d.Key, &d.Dependents); err != nil {
				return err
			}
			out[id] = d
		}
		return rows.Err()
	})
	return out, err
}
