package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Task is a task as cq prints it (its JSON shape in docs/commands.md,
// plus the spec fields). Optional values are null, never missing.
type Task struct {
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Queue         string            `json:"queue"`
	Key           *string           `json:"key"`
	Priority      string            `json:"priority"`
	Attempts      int               `json:"attempts"`
	BlockedReason *string           `json:"blocked_reason"`
	NotBefore     *string           `json:"not_before"`
	After         []string          `json:"after"`
	CreatedAt     string            `json:"created_at"`
	UpdatedAt     string            `json:"updated_at"`
	FinishedAt    *string           `json:"finished_at"`
	Reason        *string           `json:"reason"`
	Hold          bool              `json:"hold"`
	Unique        bool              `json:"unique"`
	Cmd           []string          `json:"cmd,omitempty"`
	Shell         string            `json:"shell,omitempty"`
	Intent        string            `json:"intent,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Timeout       *string           `json:"timeout"`
	Retries       *int              `json:"retries"`
	Env           map[string]string `json:"env,omitempty"`
	Cwd           *string           `json:"cwd"`
	Runs          *[]Run            `json:"runs,omitempty"`
}

// Run is one attempt as cq prints it.
type Run struct {
	ID        string  `json:"id"`
	TaskID    string  `json:"task_id"`
	Attempt   int     `json:"attempt"`
	State     string  `json:"state"`
	ExitCode  *int    `json:"exit_code"`
	Signal    *string `json:"signal"`
	Worker    *string `json:"worker"`
	StartedAt *string `json:"started_at"`
	EndedAt   *string `json:"ended_at"`
	Error     *string `json:"error"`
	Reason    *string `json:"reason"`
	CreatedAt string  `json:"created_at"`
}

// Command renders the task's command for a table.
func (t *Task) Command() string {
	switch {
	case t.Shell != "":
		return t.Shell
	case t.Intent != "":
		return "intent:" + t.Intent
	}
	q := make([]string, len(t.Cmd))
	for i, a := range t.Cmd {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote renders one argument so that the listing reads as the
// command a user would type.
func shellQuote(a string) string {
	plain := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)
	}
	if a != "" && strings.IndexFunc(a, func(r rune) bool { return !plain(r) }) < 0 {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func taskView(r *taskRow) *Task {
	var sp Spec
	_ = json.Unmarshal([]byte(r.Spec), &sp)
	t := &Task{
		ID: r.ID, State: r.State, Queue: r.Queue, Key: strp(r.Key), Priority: PriorityName(r.Priority),
		Attempts: r.Attempts, BlockedReason: strp(r.BlockedReason), After: []string{},
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: strp(r.FinishedAt), Reason: strp(r.Reason),
		Hold: r.Hold, Unique: r.Unique, Cmd: sp.Cmd, Shell: sp.Shell, Intent: sp.Intent, Payload: sp.Payload,
		Timeout: strp(sp.Timeout), Retries: sp.Retries, Env: sp.Env, Cwd: strp(sp.Cwd),
	}
	if r.State == TaskBlocked || r.State == TaskInbox {
		t.NotBefore = strp(r.NotBefore)
	}
	if r.State != TaskBlocked {
		t.BlockedReason = nil
	}
	return t
}

// ListFilter selects tasks for List.
type ListFilter struct {
	States []string
	Queue  string
	Key    string
	Limit  int // 0 = all
}

// List returns tasks newest first.
func (s *Store) List(ctx context.Context, f ListFilter) ([]*Task, error) {
	var out []*Task
	err := s.ListEach(ctx, f, func(t *Task) error {
		out = append(out, t)
		return nil
	})
	return out, err
}

// listChunk is how many tasks ListEach holds at a time.
const listChunk = 500

// ListEach calls fn with each task List returns, in the same order,
// holding at most listChunk of them at a time: cq ls --limit 0 of a
// million tasks streams them instead of building them all first.
func (s *Store) ListEach(ctx context.Context, f ListFilter, fn func(*Task) error) error {
	if f.Limit > 0 && len(f.States) > 0 && f.Key == "" {
		ts, err := s.listByState(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	}
	q, args := listQuery(taskCols, f)
	rows, err := s.DB.SQL.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	chunk := make([]*Task, 0, listChunk)
	byID := make(map[string]*Task, listChunk)
	flush := func() error {
		if err := s.fillAfter(ctx, byID); err != nil {
			return err
		}
		for _, t := range chunk {
			if err := fn(t); err != nil {
				return err
			}
		}
		chunk = chunk[:0]
		clear(byID)
		return nil
	}
	for rows.Next() {
		r, err := scanTask(rows)
		if err != nil {
			return err
		}
		t := taskView(r)
		chunk = append(chunk, t)
		byID[t.ID] = t
		if len(chunk) == listChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return flush()
}

// listQuery is the SELECT of cols for List's filter, newest first.
func listQuery(cols string, f ListFilter) (string, []any) {
	q, args := listWhere(`SELECT `+cols+` FROM tasks`, f)
	// Insertion order is creation order: newest first without an index of
	// its own.
	q += ` ORDER BY rowid DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return q, args
}

// Count is how many tasks List's filter selects, its limit aside: a list
// cut short by the limit can say how many it left out.
func (s *Store) Count(ctx context.Context, f ListFilter) (int, error) {
	q, args := listWhere(`SELECT COUNT(*) FROM tasks`, f)
	var n int
	err := s.DB.SQL.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// listWhere adds to q the WHERE clause of List's filter.
func listWhere(q string, f ListFilter) (string, []any) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, `state IN (`+strings.TrimSuffix(strings.Repeat("?,", len(f.States)), ",")+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.Queue != "" {
		where = append(where, `queue = ?`)
		args = append(args, f.Queue)
	}
	if f.Key != "" {
		where = append(where, `key = ?`)
		args = append(args, f.Key)
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return q, args
}

// ListIDEach calls fn with the id of each task List returns, in the same
// order, without reading the rest of each task (cq ls -q).
func (s *Store) ListIDEach(ctx context.Context, f ListFilter, fn func(id string) error) error {
	if f.Limit > 0 && len(f.States) > 0 && f.Key == "" {
		ts, err := s.listByState(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := fn(t.ID); err != nil {
				return err
			}
		}
		return nil
	}
	q, args := listQuery("id", f)
	rows, err := s.DB.SQL.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return rows.Err()
}

// listByState is List for a page of tasks in given states. A state may
// hold millions of tasks: read through tasks_state (state, queue), the
// newest first of them all would sort every one (2.4 s for 1.5M). So each
// state and queue gives its newest Limit rowids, in index order, and the
// page is the newest Limit of those.
func (s *Store) listByState(ctx context.Context, f ListFilter) ([]*Task, error) {
	queues := []string{f.Queue}
	if f.Queue == "" {
		var err error
		if queues, err = queryIDs(ctx, s.DB.SQL, `SELECT name FROM queues`); err != nil {
			return nil, err
		}
	}
	var rowids []int64
	for _, st := range f.States {
		for _, q := range queues {
			rows, err := s.DB.SQL.QueryContext(ctx, `SELECT rowid FROM tasks WHERE state = ? AND queue = ? ORDER BY rowid DESC LIMIT ?`, st, q, f.Limit)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return nil, err
				}
				rowids = append(rowids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(rowids)
	rowids = slices.Compact(rowids) // a state given twice
	slices.Reverse(rowids)
	rowids = rowids[:min(len(rowids), f.Limit)]
	if len(rowids) == 0 {
		return nil, nil
	}
	args := make([]any, len(rowids))
	for i, id := range rowids {
		args[i] = id
	}
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE rowid IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`) ORDER BY rowid DESC`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Task
	byID := map[string]*Task{}
	for rows.Next() {
		r, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		t := taskView(r)
		out = append(out, t)
		byID[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, s.fillAfter(ctx, byID)
}

// fillAfter loads the dependencies of the given tasks.
func (s *Store) fillAfter(ctx context.Context, byID map[string]*Task) error {
	if len(byID) == 0 {
		return nil
	}
	// A page of tasks asks by id; a listing of everything reads the whole
	// (small) dependency table instead of building a huge IN list.
	q, args := `SELECT task_id, dep_id FROM task_deps ORDER BY task_id, pos`, []any(nil)
	if len(byID) <= 500 {
		for id := range byID {
			args = append(args, id)
		}
		q = `SELECT task_id, dep_id FROM task_deps WHERE task_id IN (` +
			strings.TrimSuffix(strings.Repeat("?,", len(args)), ",") + `) ORDER BY task_id, pos`
	}
	rows, err := s.DB.SQL.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var tid, dep string
		if err := rows.Scan(&tid, &dep); err != nil {
			return err
		}
		if t := byID[tid]; t != nil {
			t.After = append(t.After, dep)
		}
	}
	return rows.Err()
}

// Get returns one task with its runs, oldest first.
func (s *Store) Get(ctx context.Context, ref string) (*Task, error) {
	id, err := s.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	r, err := getTask(ctx, s.DB, id)
	if err != nil {
		return nil, err
	}
	t := taskView(r)
	if err := s.fillAfter(ctx, map[string]*Task{t.ID: t}); err != nil {
		return nil, err
	}
	runs, err := s.Runs(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	t.Runs = &runs
	return t, nil
}

// TaskStatus is a task's state and reason, what cq wait watches.
type TaskStatus struct {
	State  string
	Reason *string
}

// taskStatusChunk bounds the ids of one TaskStatuses query.
const taskStatusChunk = 500

// TaskStatuses reads the state and reason of the tasks with these exact
// ids, a few hundred per query; an id with no task is left out.
func (s *Store) TaskStatuses(ctx context.Context, ids []string) (map[string]TaskStatus, error) {
	out := make(map[string]TaskStatus, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), taskStatusChunk)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		ids = ids[n:]
		rows, err := s.DB.SQL.QueryContext(ctx, `SELECT id, state, reason FROM tasks WHERE id IN (?`+strings.Repeat(`,?`, n-1)+`)`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			var st TaskStatus
			var reason sql.NullString
			if err := rows.Scan(&id, &st.State, &reason); err != nil {
				rows.Close()
				return nil, err
			}
			st.Reason = nsp(reason)
			out[id] = st
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const runViewCols = `id, task_id, attempt, state, exit_code, signal, worker, started_at, ended_at, error, reason, created_at`

func scanRunView(sc interface{ Scan(...any) error }) (Run, error) {
	var r Run
	var exit sql.NullInt64
	var sig, worker, started, ended, errs, reason sql.NullString
	if err := sc.Scan(&r.ID, &r.TaskID, &r.Attempt, &r.State, &exit, &sig, &worker, &started, &ended, &errs, &reason, &r.CreatedAt); err != nil {
		return r, err
	}
	if exit.Valid {
		v := int(exit.Int64)
		r.ExitCode = &v
	}
	r.Signal, r.Worker, r.StartedAt, r.EndedAt = nsp(sig), nsp(worker), nsp(started), nsp(ended)
	r.Error, r.Reason = nsp(errs), nsp(reason)
	return r, nil
}

// runView reads one run as cq prints it.
func runView(ctx context.Context, q querier, runID string) (*Run, error) {
	r, err := scanRunView(q.QueryRowContext(ctx, `SELECT `+runViewCols+` FROM runs WHERE id = ?`, runID))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Runs returns a task's runs, oldest first.
func (s *Store) Runs(ctx context.Context, taskID string) ([]Run, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT `+runViewCols+` FROM runs WHERE task_id = ? ORDER BY attempt`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	runs := []Run{}
	for rows.Next() {
		r, err := scanRunView(rows)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, rows.Err()
}

func nsp(n sql.NullString) *string {
	if !n.Valid {
		return nil
	}
	return &n.String
}

// Event is one entry of the event log (docs/events.md).
type Event struct {
	Seq    int64           `json:"seq"`
	At     string          `json:"at"`
	Kind   string          `json:"kind"`
	TaskID *string         `json:"task_id"`
	RunID  *string         `json:"run_id"`
	From   *string         `json:"from"`
	To     *string         `json:"to"`
	Reason *string         `json:"reason"`
	Data   json.RawMessage `json:"data"` // null when the event has none
}

// Events returns up to limit events with seq > since, in seq order.
func (s *Store) Events(ctx context.Context, since int64, limit int) ([]Event, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT seq, at, kind, task_id, run_id, from_state, to_state, reason, data
		FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, since, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var task, run, from, to, reason, data sql.NullString
		if err := rows.Scan(&e.Seq, &e.At, &e.Kind, &task, &run, &from, &to, &reason, &data); err != nil {
			return nil, err
		}
		e.TaskID, e.RunID, e.From, e.To, e.Reason = nsp(task), nsp(run), nsp(from), nsp(to), nsp(reason)
		if data.Valid {
			e.Data = json.RawMessage(data.String)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// LastSeq is the seq of the newest event, or 0.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	return lastSeq(ctx, s.DB.SQL)
}

func lastSeq(ctx context.Context, q querier) (int64, error) {
	var seq int64
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&seq)
	return seq, err
}

// TaskEvents returns every event of one task, in order.
func (s *Store) TaskEvents(ctx context.Context, taskID string) ([]Event, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT seq, at, kind, task_id, run_id, from_state, to_state, reason, data
		FROM events WHERE task_id = ? ORDER BY seq`, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var task, run, from, to, reason, data sql.NullString
		if err := rows.Scan(&e.Seq, &e.At, &e.Kind, &task, &run, &from, &to, &reason, &data); err != nil {
			return nil, err
		}
		e.TaskID, e.RunID, e.From, e.To, e.Reason = nsp(task), nsp(run), nsp(from), nsp(to), nsp(reason)
		out = append(out, e)
	}
	return out, rows.Err()
}

// PromoteDue moves blocked tasks whose time has come (a retry backoff or a
// schedule) and that nothing else blocks back to todo. It returns how many
// moved.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	n := 0
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks
			WHERE state = 'blocked' AND not_before IS NOT NULL AND not_before <= ? AND hold = 0 AND deps_left = 0 LIMIT 1000`, FormatTime(now))
		if err != nil {
			return err
		}
		due, err := scanTasks(rows)
		if err != nil {
			return err
		}
		n, err = promote(ctx, tx, now, due, func(t *taskRow) string {
			if t.NotBeforeWhy != "" {
				return t.NotBeforeWhy + " due"
			}
			return "due"
		})
		return err
	})
	return n, err
}

// promote moves blocked tasks that nothing blocks any more to todo, each
// with the reason why(t), and returns how many moved.
func promote(ctx context.Context, tx *sqlite.Tx, now time.Time, ts []*taskRow, why func(*taskRow) string) (int, error) {
	for i, t := range ts {
		if err := casTask(ctx, tx, now, t, TaskTodo, "", why(t), todoNow(now)); err != nil {
			return i, err
		}
	}
	return len(ts), nil
}

// HasRunnable reports, without taking the write lock, whether any task is
// waiting at the head of a lane; a worker checks it before claiming.
func (s *Store) HasRunnable(ctx context.Context) (bool, error) {
	var one int
	err := s.DB.SQL.QueryRowContext(ctx, `SELECT 1 FROM tasks INDEXED BY tasks_claim WHERE state = 'todo' AND lane_head = 1 LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// NextDue is the earliest time a blocked task waits for (a backoff or a
// schedule), if any.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var nb sql.NullString
	err := s.DB.SQL.QueryRowContext(ctx, `SELECT MIN(not_before) FROM tasks WHERE state = 'blocked' AND not_before IS NOT NULL`).Scan(&nb)
	if err != nil || !nb.Valid {
		return time.Time{}, false, err
	}
	return ParseStoredTime(nb.String), true, nil
}

// QueueTimeouts returns each queue's run time limit (0: none).
func (s *Store) QueueTimeouts(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT name, timeout_ms FROM queues`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var name string
		var ms int64
		if err := rows.Scan(&name, &ms); err != nil {
			return nil, err
		}
		out[name] = time.Duration(ms) * time.Millisecond
	}
	return out, rows.Err()
}

// CancellingRuns returns the ids of this worker's runs that a user asked
// to cancel.
func (s *Store) CancellingRuns(ctx context.Context, worker string) ([]string, error) {
	return queryIDs(ctx, s.DB.SQL, sqlCancellingRuns, worker)
}
