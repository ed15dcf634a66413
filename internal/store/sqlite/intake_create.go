package sqlite

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/cq-dev/cq/internal/store"
)

// The creation of tasks (store.IntakeWriter): into inbox, and through the
// gateway step at once, one by one or many with one statement per table.

func (t *Tx) TaskCreateInbox(ctx context.Context, r store.Task, at string) error {
	_, err := t.ExecContext(ctx, `INSERT INTO tasks (id, state, queue, key, priority, spec, is_unique, hold, deps_left,
		not_before, not_before_why, created_at, updated_at) VALUES (?, 'inbox', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Queue, nullable(r.Key), r.Priority, r.Spec, r.Unique, r.Hold, r.DepsLeft,
		nullable(r.NotBefore), nullable(r.NotBeforeWhy), at, at)
	return err
}

// TaskCreateEnqueued writes the task row once, in its final state, after
// its two events, instead of an insert followed by an update.
func (t *Tx) TaskCreateEnqueued(ctx context.Context, r store.Task, at string) error {
	// The task's seq is its gateway event's: the events pending are
	// written first, then the two of this task in one statement.
	if err := t.Flush(); err != nil {
		return err
	}
	res, err := t.ExecContext(ctx, `INSERT INTO events (at, kind, task_id, from_state, to_state)
		VALUES (?1, 'task.created', ?2, NULL, 'inbox'), (?1, 'task.' || ?3, ?2, 'inbox', ?3)`,
		at, r.ID, r.State)
	if err != nil {
		return err
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return err
	}
	_, err = t.ExecContext(ctx, `INSERT INTO tasks (id, state, queue, key, priority, seq, lane_head, spec, is_unique, hold,
		deps_left, not_before, not_before_why, blocked_reason, todo_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.State, r.Queue, nullable(r.Key), r.Priority, seq, r.LaneHead, r.Spec, r.Unique, r.Hold,
		r.DepsLeft, nullable(r.NotBefore), nullable(r.NotBeforeWhy), nullable(r.BlockedReason), nullable(r.TodoAt), at, at)
	return err
}

// TaskCreateEnqueuedBatch writes the tasks and their two events each with
// one multi-row INSERT into events and one into tasks per
// createBatchRows tasks: the same rows, in the same order, as
// TaskCreateEnqueued writes one by one, for a fraction of the statements
// and bound values. Events get consecutive seqs in VALUES order
// (AUTOINCREMENT under the write lock), so each task's seq, its gateway
// event's, is computed from the last one.
func (t *Tx) TaskCreateEnqueuedBatch(ctx context.Context, ts []*store.Task, at string) error {
	for len(ts) > 0 {
		n := min(len(ts), createBatchRows)
		if err := t.taskCreateEnqueuedBatch(ctx, ts[:n], at); err != nil {
			return err
		}
		ts = ts[n:]
	}
	return nil
}

func (t *Tx) taskCreateEnqueuedBatch(ctx context.Context, ts []*store.Task, at string) error {
	n := len(ts)
	q := createBatchQueries(n)
	args := make([]any, 0, 1+createBatchArgs*n)
	args = append(args, at)
	for _, r := range ts {
		args = append(args, r.ID, r.State)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	res, err := t.ExecMany(ctx, q.events, args...)
	if err != nil {
		return err
	}
	last, err := res.LastInsertId()
	if err != nil {
		return err
	}
	args = args[:1]
	for i, r := range ts {
		hold := 0
		if r.Hold {
			hold = 1
		}
		seq := last - int64(2*(n-1-i))
		args = append(args, r.ID, r.State, r.Queue, r.Priority, seq, r.Spec, hold,
			nullable(r.NotBefore), nullable(r.NotBeforeWhy), nullable(r.BlockedReason), nullable(r.TodoAt))
	}
	return t.Run(q.tasks, args...)
}

// createBatchRows is how many tasks one pair of statements writes: 256
// tasks are 768 rows and under 3,000 bound values.
const createBatchRows = 256

// createBatchArgs is how many values the tasks INSERT binds per task (the
// time, ?1, is shared by every row of both statements).
const createBatchArgs = 11

// createBatchSQL is the text of the two INSERTs for one number of tasks.
type createBatchSQL struct{ events, tasks string }

var (
	createBatchMu    sync.Mutex
	createBatchCache = map[int]createBatchSQL{}
)

// createBatchQueries returns the statements for n tasks, built once per n
// (almost always createBatchRows, and the remainder of a batch): the same
// text each time, so the connection's statement cache prepares it once.
// At most 16 sizes are kept (about 40 KB of text each at createBatchRows).
func createBatchQueries(n int) createBatchSQL {
	createBatchMu.Lock()
	defer createBatchMu.Unlock()
	if q, ok := createBatchCache[n]; ok {
		return q
	}
	var ev, tk strings.Builder
	ev.WriteString(`INSERT INTO events (at, kind, task_id, from_state, to_state) VALUES `)
	tk.WriteString(`INSERT INTO tasks (id, state, queue, priority, seq, lane_head, spec, hold,
		not_before, not_before_why, blocked_reason, todo_at, created_at, updated_at) VALUES `)
	for i := range n {
		if i > 0 {
			ev.WriteByte(',')
			tk.WriteByte(',')
		}
		// Events: ?1 the time, then the task's id and state.
		id, to := 2+2*i, 3+2*i
		fmt.Fprintf(&ev, "(?1,'task.created',?%d,NULL,'inbox'),(?1,'task.'||?%d,?%d,'inbox',?%d)", id, to, id, to)
		// Tasks: ?1 the time, then createBatchArgs values per task.
		b := 2 + createBatchArgs*i
		fmt.Fprintf(&tk, "(?%d,?%d,?%d,?%d,?%d,1,?%d,?%d,?%d,?%d,?%d,?%d,?1,?1)",
			b, b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8, b+9, b+10)
	}
	q := createBatchSQL{events: ev.String(), tasks: tk.String()}
	if len(createBatchCache) < 16 {
		createBatchCache[n] = q
	}
	return q
}
