// Package queue is cq's domain: tasks, runs, their state machines, and every
// statement that reads or changes them. Each state change is one
// conditional UPDATE on the expected state (a compare-and-set) committed in
// the same transaction as the event that records it.
package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Store is the task store over one database.
type Store struct {
	DB *sqlite.DB
	// Now is the wall clock, for every time a user reads or writes;
	// tests replace it to move time without waiting.
	Now func() time.Time
	// Boot is the clock leases expire on and the start timeout counts on
	// (see leaseNow); tests that move Now to expire leases move it too
	// (clock.Following).
	Boot func() clock.BootTime
	// StopCancelled, when set, is called inside the transaction of a
	// user's cancel that ends a run still queued (queued →
	// cancelled), before it commits and so before the task's key lane is
	// free: its worker may have started the process and not yet recorded
	// the start (a worker stalled there would leave it running). cq sets it
	// to kill such processes on this host, as the reaper does.
	StopCancelled func(Reaped)
	// perRow, set by tests only, records every start and end with its
	// own statements, as the batched paths must match.
	perRow bool
}

// New returns a Store over d using the host's clocks.
func New(d *sqlite.DB) *Store {
	return &Store{DB: d, Now: clock.Wall, Boot: clock.Boot}
}

func (s *Store) now() time.Time { return s.Now().UTC() }

// write runs fn in one write transaction.
func (s *Store) write(ctx context.Context, fn func(tx *sqlite.Tx, now time.Time) error) error {
	return s.DB.Write(ctx, func(tx *sqlite.Tx) error { return fn(tx, s.now()) })
}

// querier is what both *sql.DB and *sqlite.Tx offer.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// taskRow is a tasks row as stored.
type taskRow struct {
	ID             string
	State          string
	Queue          string
	Key            string
	Priority       int
	Seq            int64
	LaneHead       bool
	Spec           string
	Unique         bool
	Hold           bool
	DepsLeft       int
	NotBefore      string
	NotBeforeWhy   string
	BlockedReason  string
	Reason         string
	Attempts       int
	FailsOther     int
	FailsTransient int
	FailsTimeout   int
	TodoAt         string
	CreatedAt      string
	UpdatedAt      string
	FinishedAt     string
}

const taskCols = `id, state, queue, COALESCE(key,''), priority, COALESCE(seq,0), lane_head, spec, is_unique, hold,
	deps_left, COALESCE(not_before,''), COALESCE(not_before_why,''), COALESCE(blocked_reason,''), COALESCE(reason,''),
	attempts, fails_other, fails_transient, fails_timeout, COALESCE(todo_at,''), created_at, updated_at, COALESCE(finished_at,'')`

func scanTask(sc interface{ Scan(...any) error }) (*taskRow, error) {
	var t taskRow
	err := sc.Scan(&t.ID, &t.State, &t.Queue, &t.Key, &t.Priority, &t.Seq, &t.LaneHead, &t.Spec, &t.Unique, &t.Hold,
		&t.DepsLeft, &t.NotBefore, &t.NotBeforeWhy, &t.BlockedReason, &t.Reason,
		&t.Attempts, &t.FailsOther, &t.FailsTransient, &t.FailsTimeout, &t.TodoAt, &t.CreatedAt, &t.UpdatedAt, &t.FinishedAt)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func getTask(ctx context.Context, q querier, id string) (*taskRow, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFoundf("no task %q", id)
	}
	return t, err
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// blockedReason names the first condition that still blocks a task, in
// the documented order (hold, dependency, retry, scheduled), or "" when
// nothing does.
func blockedReason(hold bool, depsLeft int, notBefore, why string, now time.Time) string {
	switch {
	case hold:
		return BlockedHold
	case depsLeft > 0:
		return BlockedDependency
	case notBefore != "" && notBefore > FormatTime(now):
		if why == "" {
			return BlockedScheduled
		}
		return why
	}
	return ""
}

// nextSeq is the seq the next event will get; a task entering its lane
// takes it as its place, so lane order is gateway order.
func nextSeq(ctx context.Context, tx *sqlite.Tx) (int64, error) {
	// The events still pending take their seqs first.
	if err := tx.Flush(); err != nil {
		return 0, err
	}
	var seq int64
	err := tx.QueryRowContext(ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) + 1`).Scan(&seq)
	return seq, err
}

// event is one row of the event log.
type event struct {
	Kind, TaskID, RunID, From, To, Reason string
	Data                                  any
}

// eventRows is the INSERT of the events a transaction writes: they go in
// with one statement when it commits (see sqlite.Batch), in the order they
// were added, so their seqs follow that order as before.
var eventRows = sqlite.NewBatch(`INSERT INTO events (at, kind, task_id, run_id, from_state, to_state, reason, data) VALUES `, 8)

// rawJSON is event data already encoded.
type rawJSON string

func addEvent(_ context.Context, tx *sqlite.Tx, now time.Time, e event) error {
	var data any
	if r, ok := e.Data.(rawJSON); ok {
		data = string(r)
	} else if e.Data != nil {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return err
		}
		data = string(b)
	}
	return tx.Add(eventRows, FormatTime(now), e.Kind, nullable(e.TaskID), nullable(e.RunID), nullable(e.From), nullable(e.To), nullable(e.Reason), data)
}

// laneIsFree reports whether no live task holds key's lane, so a task
// entering it becomes its head.
func laneIsFree(ctx context.Context, tx *sqlite.Tx, key, exceptID string) (bool, error) {
	if key == "" {
		return true, nil
	}
	var one int
	err := tx.QueryRowContext(ctx, sqlLaneHeld, key, exceptID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// advanceLane hands key's lane to its next task after its head left it.
func advanceLane(ctx context.Context, tx *sqlite.Tx, key string) error {
	if key == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, sqlAdvanceLane, key)
	return err
}

// laneStates and keyLiveStates are the conditions of the partial indexes
// tasks_lane and tasks_key_live, word for word (schema.sql, migration 5):
// a query that repeats one may read its index.
const (
	laneStates    = `(state = 'todo' OR state = 'blocked' OR state = 'doing')`
	keyLiveStates = `(state = 'inbox' OR state = 'todo' OR state = 'blocked' OR state = 'doing')`
	// sqlKeyHolder finds a live task of a key other than the given id
	// (--unique).
	sqlKeyHolder = `SELECT id, state FROM tasks WHERE key = ? AND id != ? AND ` + keyLiveStates + ` LIMIT 1`
)

// Statements whose bound id or key is written CAST(? AS TEXT), the same
// value for the text bound to it. With a bare ? SQLite's planner marks
// the parameter as one whose value may change the plan, and the driver
// clears the bindings before each use of a cached statement, which
// expires such a statement: it was prepared again every time it ran, at
// many times what running it costs (docs/performance.md).
const (
	sqlLaneHeld    = `SELECT 1 FROM tasks WHERE key = CAST(? AS TEXT) AND ` + laneStates + ` AND id != ? LIMIT 1`
	sqlAdvanceLane = `UPDATE tasks SET lane_head = 1
		WHERE id = (SELECT id FROM tasks WHERE key = CAST(? AS TEXT) AND ` + laneStates + ` ORDER BY seq LIMIT 1)
		AND lane_head = 0`
	// sqlDeadDependency finds a dependency that ended failed or
	// cancelled, still stored or deleted since by cleanup (dep_end).
	sqlDeadDependency = `SELECT d.dep_id, COALESCE(t.state, d.dep_end) FROM task_deps d LEFT JOIN tasks t ON t.id = d.dep_id
		WHERE d.task_id = CAST(? AS TEXT) AND (t.state IN ('failed','cancelled') OR (t.id IS NULL AND d.dep_end IN ('failed','cancelled')))
		ORDER BY d.pos LIMIT 1`
	sqlWaitingDependents = `SELECT ` + taskCols + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = CAST(? AS TEXT) AND t.state IN ('inbox','todo','blocked')`
	sqlReadyDependents = `SELECT ` + taskCols + ` FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.dep_id = CAST(? AS TEXT) AND t.state = 'blocked' AND t.deps_left = 0`
)

// casTask moves a task from one state to another and records the event;
// set lists extra assignments. A lost CAS returns a conflict naming the
// state the task is in now.
func casTask(ctx context.Context, tx *sqlite.Tx, now time.Time, t *taskRow, to, kind, reason string, set string, args ...any) error {
	q := `UPDATE tasks SET state = ?, updated_at = ?`
	if set != "" {
		q += `, ` + set
	}
	q += ` WHERE id = ? AND state = ?`
	all := append([]any{to, FormatTime(now)}, args...)
	all = append(all, t.ID, t.State)
	res, err := tx.ExecContext(ctx, q, all...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		cur, err := getTask(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		return conflictf("task %s is %s, not %s", t.ID, cur.State, t.State)
	}
	if kind == "" {
		kind = "task." + to
	}
	return addEvent(ctx, tx, now, event{Kind: kind, TaskID: t.ID, From: t.State, To: to, Reason: reason})
}

// enterLane moves a task into todo or blocked (from inbox at the gateway,
// or from failed/cancelled on cq retry): it takes the next seq, which puts
// it at the back of its key lane, and becomes the lane's head if the lane
// is free. If a dependency already ended failed or cancelled it is
// cancelled instead.
func enterLane(ctx context.Context, tx *sqlite.Tx, now time.Time, t *taskRow, reason string, mayHaveDeps bool) (string, error) {
	if mayHaveDeps {
		if dead, why, err := deadDependency(ctx, tx, t.ID); err != nil {
			return "", err
		} else if dead != "" {
			return TaskCancelled, cancelTask(ctx, tx, now, t, why)
		}
	}
	br := blockedReason(t.Hold, t.DepsLeft, t.NotBefore, t.NotBeforeWhy, now)
	to := TaskTodo
	if br != "" {
		to = TaskBlocked
	}
	seq, err := nextSeq(ctx, tx)
	if err != nil {
		return "", err
	}
	free, err := laneIsFree(ctx, tx, t.Key, t.ID)
	if err != nil {
		return "", err
	}
	todoAt := any(nil)
	if to == TaskTodo {
		todoAt = FormatTime(now)
	}
	err = casTask(ctx, tx, now, t, to, "", reason,
		`seq = ?, lane_head = ?, blocked_reason = ?, todo_at = ?, warned = 0, finished_at = NULL, reason = ?`,
		seq, free, nullable(br), todoAt, nullable(reason))
	return to, err
}

// deadDependency returns a dependency of id that ended failed or
// cancelled, with the reason a dependent is cancelled for it.
func deadDependency(ctx context.Context, tx *sqlite.Tx, id string) (string, string, error) {
	var dep, state string
	err := tx.QueryRowContext(ctx, sqlDeadDependency, id).Scan(&dep, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	return dep, "dependency " + dep + " " + state, nil
}

// cancelTask ends a task that is not running (inbox, todo, blocked; or
// doing whose run is being cancelled) as cancelled, hands its lane on, and
// cancels its dependents, transitively.
func cancelTask(ctx context.Context, tx *sqlite.Tx, now time.Time, t *taskRow, reason string) error {
	wasInLane := t.State == TaskTodo || t.State == TaskBlocked || t.State == TaskDoing
	err := casTask(ctx, tx, now, t, TaskCancelled, "", reason,
		`lane_head = 0, blocked_reason = NULL, finished_at = ?, reason = ?`, FormatTime(now), nullable(reason))
	if err != nil {
		return err
	}
	if wasInLane && t.LaneHead {
		if err := advanceLane(ctx, tx, t.Key); err != nil {
			return err
		}
	}
	return cancelDependents(ctx, tx, now, t.ID, "dependency "+t.ID+" cancelled")
}

// cancelDependents cancels every task still waiting on dep.
func cancelDependents(ctx context.Context, tx *sqlite.Tx, now time.Time, dep, reason string) error {
	rows, err := tx.QueryContext(ctx, sqlWaitingDependents, dep)
	if err != nil {
		return err
	}
	var deps []*taskRow
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return err
		}
		deps = append(deps, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range deps {
		// Read again: a task reached by two paths (a diamond: it waits on
		// dep and on another of dep's dependents) was cancelled already
		// by the cancel of an earlier one in this list.
		cur, err := getTask(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if TaskTerminal(cur.State) || cur.State == TaskDoing {
			continue
		}
		if err := cancelTask(ctx, tx, now, cur, reason); err != nil {
			return err
		}
	}
	return nil
}

// ensureQueue records that a queue exists, with default settings.
func ensureQueue(ctx context.Context, tx *sqlite.Tx, now time.Time, name string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO queues (name, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		name, FormatTime(now), FormatTime(now))
	return err
}
