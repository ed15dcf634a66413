package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

// The reads of shell completion, which runs on every Tab press: each
// stops after a bounded number of rows, so that it stays cheap on a store
// of millions of tasks. Newest first is pos order, latest first.
const (
	// sqlCompletionCount counts the tasks of a prefix, up to $3: every id
	// character is ASCII below '~', so prefix || '~' bounds the range.
	sqlCompletionCount = `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE id >= $1 AND id < $2 LIMIT $3) m`
	// sqlCompletionNarrow reads a narrow prefix whole, through the
	// primary key, and sorts it.
	sqlCompletionNarrow = `SELECT id, state, queue, spec FROM tasks WHERE id >= $1 AND id < $2
		ORDER BY state IN ('done','failed','cancelled'), pos DESC LIMIT $3`
	// sqlCompletionWide reads, for each state and queue, its newest $1
	// tasks from tasks_state (state, queue, pos), and keeps the first $1
	// of them: at most 7 × queues × $1 index entries, whatever the store
	// holds. Only the rows kept are read from the table. $2 and $3 bound
	// the ids (NULL: any). The state and queue are bounded by row
	// comparisons, not equalities, and ordered on: with equalities the
	// planner may walk tasks_pos backward instead, filtering, which reads
	// the whole table for a state and queue with few tasks; only
	// tasks_state gives this order.
	sqlCompletionWide = `WITH c AS (
			SELECT t.pos, s.terminal
			FROM (VALUES ('inbox', false), ('todo', false), ('blocked', false), ('doing', false),
					('done', true), ('failed', true), ('cancelled', true)) AS s(state, terminal)
			CROSS JOIN queues q
			CROSS JOIN LATERAL (
				SELECT pos FROM tasks
				WHERE (tasks.state, tasks.queue) >= (s.state, q.name) AND (tasks.state, tasks.queue) <= (s.state, q.name)
					AND ($2::text IS NULL OR (tasks.id >= $2 AND tasks.id < $3))
				ORDER BY tasks.state DESC, tasks.queue DESC, pos DESC LIMIT $1) t
			ORDER BY s.terminal, t.pos DESC LIMIT $1)
		SELECT tasks.id, tasks.state, tasks.queue, tasks.spec FROM c JOIN tasks ON tasks.pos = c.pos
		ORDER BY c.terminal, c.pos DESC`
)

func (r *reads) CompletionTasks(ctx context.Context, prefix string, limit, narrow int) ([]store.TaskHint, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx = r.cx(ctx)
	var lo, hi any
	if prefix != "" {
		lo, hi = prefix, prefix+"~"
		var n int
		if err := r.q.QueryRow(ctx, sqlCompletionCount, lo, hi, narrow).Scan(&n); err != nil {
			return nil, err
		}
		if n < narrow {
			return r.completionHints(ctx, sqlCompletionNarrow, lo, hi, limit)
		}
	}
	return r.completionHints(ctx, sqlCompletionWide, limit, lo, hi)
}

func (r *reads) completionHints(ctx context.Context, query string, args ...any) ([]store.TaskHint, error) {
	rows, err := r.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TaskHint
	for rows.Next() {
		var h store.TaskHint
		if err := rows.Scan(&h.ID, &h.State, &h.Queue, &h.Spec); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (r *reads) CompletionQueues(ctx context.Context) ([]string, error) {
	return queryStrings(r.cx(ctx), r.q, `SELECT name FROM queues ORDER BY name`)
}
