package queue

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// TimeoutQueuedRunsThen ends runs that stayed queued (claimed, never
// started) longer than their queue's start timeout: queued → timeout,
// transient class. The lease is void: the worker's queued → running CAS
// will lose. It calls stop for each run it ends, inside the transaction,
// before the commit (see ReapExpiredThen), and returns the runs it ended.
func (s *Store) TimeoutQueuedRunsThen(ctx context.Context, stop func(Reaped)) ([]Reaped, error) {
	var out []Reaped
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		out = out[:0]
		ln := s.leaseNow(now)
		qs, err := allQueues(ctx, tx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.StartTimeoutMS <= 0 {
				continue
			}
			limit := time.Duration(q.StartTimeoutMS) * time.Millisecond
			ids, err := queryIDs(ctx, tx, sqlQueuedTooLong, append([]any{q.Name}, ln.startLateArgs(limit)...)...)
			if err != nil {
				return err
			}
			for _, id := range ids {
				r, err := getRun(ctx, tx, id)
				if err != nil {
					return err
				}
				o := Outcome{State: RunTimeout, Class: ClassTransient, Error: "start not recorded within " + limit.String()}
				if _, err := endRun(ctx, tx, now, r, o, "start_timeout"); err != nil {
					return err
				}
				out = append(out, reaped(r, RunQueued, RunTimeout))
				if stop != nil {
					stop(out[len(out)-1])
				}
			}
		}
		return nil
	})
	return out, err
}

// PromoteReady is the safety net behind the event-driven promotions: a
// blocked task that nothing blocks any more (no hold, every dependency
// done, no time to wait for) goes to todo. The dependency count is
// checked against the dependencies themselves, so a stale count heals too.
func (s *Store) PromoteReady(ctx context.Context) (int, error) {
	n := 0
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		n = 0
		// Only a task with dependency edges can have a count: a window
		// of the edges is read first (+state keeps tasks_state out of
		// it, see sqlCancelOrphans).
		if lo, hi, ok, err := depWindow(ctx, tx, now, "deps_heal_after"); err != nil {
			return err
		} else if ok {
			if _, err := tx.ExecContext(ctx, sqlHealDepCounts, lo, hi); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks
			WHERE state = 'blocked' AND hold = 0 AND deps_left = 0 AND (not_before IS NULL OR not_before <= ?) LIMIT 1000`, FormatTime(now))
		if err != nil {
			return err
		}
		ready, err := scanTasks(rows)
		if err != nil {
			return err
		}
		n, err = promote(ctx, tx, now, ready, func(*taskRow) string { return "nothing blocks it" })
		return err
	})
	return n, err
}

// sqlHealDepCounts zeroes the stale dependency count of a blocked task
// whose dependencies are all done, among the tasks of one window of the
// dependency edges (see depWindow).
const sqlHealDepCounts = `UPDATE tasks SET deps_left = 0
	WHERE +state = 'blocked' AND deps_left > 0 AND id IN (SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id
		WHERE d.task_id > ? AND d.task_id <= ? AND +t.state = 'blocked' AND t.deps_left > 0)
	AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dep ON dep.id = d.dep_id
		WHERE d.task_id = tasks.id AND dep.state != 'done')`

// sqlCancelOrphans finds tasks still waiting on a dependency that ended
// failed or cancelled, among one window of the dependency edges (see
// depWindow). It reads the edges and looks both tasks up by id: through
// tasks_state it read every failed and cancelled task of the store (3 s
// for 1.5M, every heartbeat pass, under the write lock).
const sqlCancelOrphans = `SELECT d.task_id, dep.id, dep.state FROM task_deps d
	JOIN tasks dep ON dep.id = d.dep_id JOIN tasks t ON t.id = d.task_id
	WHERE d.task_id > ? AND d.task_id <= ? AND +dep.state IN ('failed','cancelled') AND +t.state IN ('inbox','todo','blocked') LIMIT 1000`

// DepWindowEdges bounds how many dependency edges one pass of a
// dependency safety net reads.
const DepWindowEdges = 5000

// depWindow is the range (lo, hi] of dependent task ids that one pass of
// the safety net named key reads: the next DepWindowEdges edges after
// where its last pass stopped (kept in system_state), from the start
// again once a pass reached the end; ok is false when there are no edges.
// Edges stay while their tasks do, finished ones included: reading all of
// a million took about a second under the write lock, on every pass of
// every worker and of cq heartbeat. Passes come every 30 s per worker, so
// every edge is looked at within a few hundred passes; the event-driven
// cascade and promotions do the work on time.
func depWindow(ctx context.Context, tx *sqlite.Tx, now time.Time, key string) (lo, hi string, ok bool, err error) {
	if lo, _, err = systemState(ctx, tx, key); err != nil {
		return "", "", false, err
	}
	var last sql.NullString
	var n int
	for {
		if err := tx.QueryRowContext(ctx, `SELECT MAX(task_id), COUNT(*) FROM
			(SELECT task_id FROM task_deps WHERE task_id > ? ORDER BY task_id LIMIT ?)`, lo, DepWindowEdges).Scan(&last, &n); err != nil {
			return "", "", false, err
		}
		if n > 0 || lo == "" {
			break
		}
		lo = "" // past the end: from the start
	}
	if n == 0 {
		return "", "", false, nil // no edges: nothing to read or to note
	}
	next := last.String
	if n < DepWindowEdges {
		next = ""
	}
	if err := setSystemState(ctx, tx, now, key, next); err != nil {
		return "", "", false, err
	}
	return lo, last.String, true, nil
}

// CancelOrphans is the safety net behind the event-driven cascade: a task
// still waiting on a dependency that ended failed or cancelled is
// cancelled, with the reason.
func (s *Store) CancelOrphans(ctx context.Context) (int, error) {
	n := 0
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		n = 0
		lo, hi, ok, err := depWindow(ctx, tx, now, "deps_orphans_after")
		if err != nil || !ok {
			return err
		}
		rows, err := tx.QueryContext(ctx, sqlCancelOrphans, lo, hi)
		if err != nil {
			return err
		}
		type orphan struct{ id, dep, state string }
		var list []orphan
		for rows.Next() {
			var o orphan
			if err := rows.Scan(&o.id, &o.dep, &o.state); err != nil {
				rows.Close()
				return err
			}
			list = append(list, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range list {
			t, err := getTask(ctx, tx, o.id)
			if err != nil {
				return err
			}
			if TaskTerminal(t.State) || t.State == TaskDoing {
				continue // cancelled meanwhile as another orphan's dependent
			}
			if err := cancelTask(ctx, tx, now, t, "dependency "+o.dep+" "+o.state); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// WarnBatch is how many tasks per queue one WarnWaitingStep warns about.
const WarnBatch = 1000

// WarnWaitingStep records one task.waiting event for each task that has
// waited in todo longer than its queue's warn-after, once per entry into
// todo (seed 004: warn, never cancel). It is one transaction that warns
// about at most limit tasks per queue; more says that some queue may have
// more to warn about.
func (s *Store) WarnWaitingStep(ctx context.Context, limit int) (n int, more bool, err error) {
	err = s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		n, more = 0, false
		qs, err := allQueues(ctx, tx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.WarnAfterMS <= 0 {
				continue
			}
			after := time.Duration(q.WarnAfterMS) * time.Millisecond
			ids, err := queryIDs(ctx, tx, `SELECT id FROM tasks WHERE state = 'todo' AND queue = ? AND warned = 0 AND todo_at < ? LIMIT ?`,
				q.Name, FormatTime(now.Add(-after)), limit)
			if err != nil {
				return err
			}
			more = more || len(ids) == limit
			for _, id := range ids {
				res, err := tx.ExecContext(ctx, `UPDATE tasks SET warned = 1 WHERE id = ? AND state = 'todo' AND warned = 0`, id)
				if err != nil {
					return err
				}
				if k, _ := res.RowsAffected(); k != 1 {
					continue
				}
				if err := addEvent(ctx, tx, now, event{Kind: "task.waiting", TaskID: id, From: TaskTodo, To: TaskTodo,
					Reason: "waiting in todo longer than " + after.String(),
					Data:   map[string]any{"queue": q.Name, "warn_after": after.String()}}); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, more, err
}

// SetSystemState records key/value pairs in system_state (seed 001).
func (s *Store) SetSystemState(ctx context.Context, kv map[string]string) error {
	return s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		for k, v := range kv {
			if err := setSystemState(ctx, tx, now, k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

func setSystemState(ctx context.Context, tx *sqlite.Tx, now time.Time, key, value string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO system_state (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, FormatTime(now))
	return err
}

// SystemState reads one system_state value; ok is false if it was never
// set.
func (s *Store) SystemState(ctx context.Context, key string) (string, bool, error) {
	return systemState(ctx, s.DB.SQL, key)
}

func systemState(ctx context.Context, q querier, key string) (string, bool, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT value FROM system_state WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}

func allQueues(ctx context.Context, q querier) ([]*queueRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+queueCols+` FROM queues ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*queueRow
	for rows.Next() {
		r, err := scanQueue(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func queryIDs(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func scanTasks(rows *sql.Rows) ([]*taskRow, error) {
	defer rows.Close()
	var out []*taskRow
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func itoa(n int) string { return strconv.Itoa(n) }

// EndedRun names a run that has ended, with when.
type EndedRun struct{ TaskID, RunID, EndedAt string }

// EndedRunsAfter lists up to limit runs that ended after the run (after,
// afterID) in (ended_at, id) order, and before the time before, from the
// runs_ended index.
func (s *Store) EndedRunsAfter(ctx context.Context, after, afterID string, before time.Time, limit int) ([]EndedRun, error) {
	rows, err := s.DB.SQL.QueryContext(ctx, `SELECT task_id, id, ended_at FROM runs
		WHERE ended_at IS NOT NULL AND ended_at >= ? AND ended_at < ? AND (ended_at > ? OR id > ?)
		ORDER BY ended_at, id LIMIT ?`, after, FormatTime(before), after, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []EndedRun
	for rows.Next() {
		var r EndedRun
		if err := rows.Scan(&r.TaskID, &r.RunID, &r.EndedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
