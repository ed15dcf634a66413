package queue

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
)

// IDHint is a task offered to shell completion: its id, and enough to tell
// tasks apart in a menu.
type IDHint struct {
	ID      string
	State   string
	Queue   string
	Command string
}

// narrowPrefix is how many ids a prefix may match for CompletionIDs to
// read them all through the primary key and sort them; a wider prefix
// (one character of a ULID matches most of a store) is read newest first
// through the state index and the table itself, stopping at the limit.
var narrowPrefix = 5000

// CompletionIDs returns up to limit tasks whose id starts with prefix,
// for shell completion: the tasks not yet terminal first, then the
// others, each group newest first. It only reads, and each of its reads
// stops after a bounded number of rows, so a Tab press stays cheap on a
// store of millions of tasks.
func (s *Store) CompletionIDs(ctx context.Context, prefix string, limit int) ([]IDHint, error) {
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
		if err := s.DB.SQL.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks WHERE id >= ? AND id < ? LIMIT ?)`,
			prefix, prefix+"~", narrowPrefix).Scan(&n); err != nil {
			return nil, err
		}
		if n < narrowPrefix {
			rowids, err := queryRowids(ctx, s, `SELECT rowid FROM tasks WHERE id >= ? AND id < ?
				ORDER BY state IN ('done','failed','cancelled'), rowid DESC LIMIT ?`, prefix, prefix+"~", limit)
			if err != nil {
				return nil, err
			}
			return s.idHints(ctx, rowids)
		}
	}
	queues, err := queryIDs(ctx, s.DB.SQL, `SELECT name FROM queues`)
	if err != nil {
		return nil, err
	}
	// Not yet terminal: the newest of each state and queue, in the order
	// of tasks_state (state, queue, rowid), merged newest first.
	var live []int64
	for _, st := range []string{TaskInbox, TaskTodo, TaskBlocked, TaskDoing} {
		for _, q := range queues {
			args := append([]any{st, q}, bounds...)
			ids, err := queryRowids(ctx, s, `SELECT rowid FROM tasks WHERE state = ? AND queue = ?`+cond+
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
		ids, err := queryRowids(ctx, s, `SELECT rowid FROM tasks WHERE +state IN ('done','failed','cancelled')`+plusCond+
			` ORDER BY rowid DESC LIMIT ?`, append(bounds, rest)...)
		if err != nil {
			return nil, err
		}
		rowids = append(rowids, ids...)
	}
	return s.idHints(ctx, rowids)
}

func queryRowids(ctx context.Context, s *Store, query string, args ...any) ([]int64, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, query, args...)
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

// idHints reads the tasks of rowids, in that order.
func (s *Store) idHints(ctx context.Context, rowids []int64) ([]IDHint, error) {
	if len(rowids) == 0 {
		return nil, nil
	}
	args := make([]any, len(rowids))
	for i, id := range rowids {
		args[i] = id
	}
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT rowid, id, state, queue, spec FROM tasks WHERE rowid IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byRowid := make(map[int64]IDHint, len(rowids))
	for rows.Next() {
		var rowid int64
		var h IDHint
		var spec string
		if err := rows.Scan(&rowid, &h.ID, &h.State, &h.Queue, &spec); err != nil {
			return nil, err
		}
		var sp Spec
		_ = json.Unmarshal([]byte(spec), &sp)
		h.Command = (&Task{Cmd: sp.Cmd, Shell: sp.Shell, Intent: sp.Intent}).Command()
		byRowid[rowid] = h
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]IDHint, 0, len(rowids))
	for _, id := range rowids {
		if h, ok := byRowid[id]; ok {
			out = append(out, h)
		}
	}
	return out, nil
}

// QueueNames lists the names of every queue, in order, for shell
// completion.
func (s *Store) QueueNames(ctx context.Context) ([]string, error) {
	return queryIDs(ctx, s.DB.SQL, `SELECT name FROM queues ORDER BY name`)
}
