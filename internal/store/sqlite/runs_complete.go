package sqlite

import (
	"context"
	"slices"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

// The reads of shell completion, which runs on every Tab press: each
// stops after a bounded number of rows, so that it stays cheap on a store
// of millions of tasks. Newest first is rowid order, latest first.

// completionLiveStates are the states of a task not yet terminal, each read
// through tasks_state (state, queue, rowid).
var completionLiveStates = [...]string{"inbox", "todo", "blocked", "doing"}

func (r reads) CompletionTasks(ctx context.Context, prefix string, limit, narrow int) ([]store.TaskHint, error) {
	if limit <= 0 {
		return nil, nil
	}
	var cond, plusCond string
	var bounds []any
	if prefix != "" {
		// Every id character is ASCII below '~', so prefix + '~' bounds
		// the range (as Resolve does).
		cond, plusCond = ` AND id >= ? AND id < ?`, ` AND +id >= ? AND +id < ?`
		bounds = []any{prefix, prefix + "~"}
		var n int
		if err := r.q.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE id >= ? AND id < ? LIMIT ?)`,
			prefix, prefix+"~", narrow).Scan(&n); err != nil {
			return nil, err
		}
		if n < narrow {
			// A narrow prefix: read whole through the primary key, and
			// sorted.
			rowids, err := r.completionRowids(ctx, `SELECT rowid FROM tasks WHERE id >= ? AND id < ?
				ORDER BY state IN ('done','failed','cancelled'), rowid DESC LIMIT ?`, prefix, prefix+"~", limit)
			if err != nil {
				return nil, err
			}
			return r.completionHints(ctx, rowids)
		}
	}
	// A wide one (one character of a ULID matches most of a store) is
	// read newest first through the state index and the table itself,
	// stopping at the limit.
	queues, err := queryStrings(ctx, r.q, `SELECT name FROM queues`)
	if err != nil {
		return nil, err
	}
	// Not yet terminal: the newest of each state and queue, in the order
	// of tasks_state (state, queue, rowid), merged newest first.
	var live []int64
	for _, st := range completionLiveStates {
		for _, q := range queues {
			args := append([]any{st, q}, bounds...)
			ids, err := r.completionRowids(ctx, `SELECT rowid FROM tasks WHERE state = ? AND queue = ?`+cond+
				` ORDER BY rowid DESC LIMIT ?`, append(args, limit)...)
			if err != nil {
				return nil, err
			}
			live = append(live, ids...)
		}
	}
	slices.Sort(live)
	slices.Reverse(live)
	rowids := live[:min(len(live), limit)]
	if rest := limit - len(rowids); rest > 0 {
		// Terminal tasks are most of a store: the table read newest
		// first (the unary + keeps SQLite off the indexes, whose order
		// would need a sort) meets enough of them at once.
		ids, err := r.completionRowids(ctx, `SELECT rowid FROM tasks WHERE +state IN ('done','failed','cancelled')`+plusCond+
			` ORDER BY rowid DESC LIMIT ?`, append(bounds, rest)...)
		if err != nil {
			return nil, err
		}
		rowids = append(rowids, ids...)
	}
	return r.completionHints(ctx, rowids)
}

func (r reads) completionRowids(ctx context.Context, query string, args ...any) ([]int64, error) {
	rows, err := r.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// completionHints reads the tasks of rowids, in that order.
func (r reads) completionHints(ctx context.Context, rowids []int64) ([]store.TaskHint, error) {
	if len(rowids) == 0 {
		return nil, nil
	}
	args := make([]any, len(rowids))
	for i, id := range rowids {
		args[i] = id
	}
	rows, err := r.q.QueryContext(ctx, `SELECT rowid, id, state, queue, spec FROM tasks WHERE rowid IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byRowid := make(map[int64]store.TaskHint, len(rowids))
	for rows.Next() {
		var rowid int64
		var h store.TaskHint
		if err := rows.Scan(&rowid, &h.ID, &h.State, &h.Queue, &h.Spec); err != nil {
			return nil, err
		}
		byRowid[rowid] = h
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]store.TaskHint, 0, len(rowids))
	for _, id := range rowids {
		if h, ok := byRowid[id]; ok {
			out = append(out, h)
		}
	}
	return out, nil
}

func (r reads) CompletionQueues(ctx context.Context) ([]string, error) {
	return queryStrings(ctx, r.q, `SELECT name FROM queues ORDER BY name`)
}
