package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// Created is the outcome of creating one spec.
type Created struct {
	ID    string
	State string
	// New is false when the id already existed with the same spec (a no-op).
	New bool
}

// LineError is a failure of one spec in a batch, numbered from 1.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// lineError charges err to line n when it is about that line's spec (a
// *Error: bad input, a conflict, a missing dependency); a failure of the
// store itself (a full disk) is no line's, and is returned as it is.
func lineError(n int, err error) error {
	var qe *Error
	if !errors.As(err, &qe) {
		return err
	}
	return &LineError{Line: n, Err: err}
}

// CreateOptions says what to do with new tasks.
type CreateOptions struct {
	// Enqueue passes new tasks through the gateway step at once (todo or
	// blocked) instead of leaving them in inbox.
	Enqueue bool
	// Progress, if set, is told how many specs are stored so far, every
	// ProgressEvery specs and at the end; a transaction tried again
	// starts again from 0.
	Progress func(stored int)
}

// ProgressEvery is how often Create tells CreateOptions.Progress.
const ProgressEvery = 256

// Create stores specs in one transaction: all or nothing. A failure of a
// spec is returned as a *LineError carrying its 1-based position. Specs
// must be normalised already; an --after id must be exact.
func (s *Store) Create(ctx context.Context, specs []Spec, opt CreateOptions) ([]Created, error) {
	out := make([]Created, 0, len(specs))
	err := s.writeSQL(ctx, func(tx *sqlite.Tx, now time.Time) error {
		out = out[:0]
		c := newCreator(tx, now)
		// A failed flush is charged to the first line it carried.
		flush := func() error {
			if err := c.flush(ctx); err != nil {
				return lineError(c.pendingLine, err)
			}
			return nil
		}
		for i, sp := range specs {
			if c.bulk = c.bulkable(sp, opt.Enqueue); !c.bulk {
				if err := flush(); err != nil {
					return err
				}
			}
			r, err := c.create(ctx, sp, opt.Enqueue)
			if err != nil {
				// A unique key held by a task of this same call: the error
				// undoes that task too, so it is no existing task to name.
				var qe *Error
				if errors.As(err, &qe) && qe.Existing != "" && slices.ContainsFunc(out, func(o Created) bool { return o.New && o.ID == qe.Existing }) {
					err = &Error{Kind: qe.Kind, Msg: fmt.Sprintf("key %q is held by task %s of an earlier line, so nothing is stored (--unique)", sp.Key, qe.Existing)}
				}
				return lineError(i+1, err)
			}
			if len(c.pending) == 1 {
				c.pendingLine = i + 1
			}
			if len(c.pending) >= bulkRows {
				if err := flush(); err != nil {
					return err
				}
			}
			out = append(out, r)
			if opt.Progress != nil && len(out)%ProgressEvery == 0 {
				opt.Progress(len(out))
			}
		}
		if err := flush(); err != nil {
			return err
		}
		if opt.Progress != nil {
			opt.Progress(len(out))
		}
		return nil
	})
	return out, err
}

// creator carries per-transaction caches for a run of creates.
type creator struct {
	tx     *sqlite.Tx
	now    time.Time
	queues map[string]bool
	// pending are created-and-enqueued tasks not written yet (see flush);
	// pendingLine is the batch line of the first of them.
	pending     []*taskRow
	pendingLine int
	// bulk says the spec being created may wait in pending.
	bulk bool
}

// bulkRows is how many tasks one flush writes with one statement per
// table: 256 tasks are 768 rows and under 3,000 bound values.
const bulkRows = 256

// noBulk turns the bulk path off (tests compare both paths).
var noBulk bool

// bulkable reports whether sp can wait in pending: a plain create-and-
// enqueue that reads nothing from the store (no id of its own, no key, no
// dependencies). Any other spec first flushes what waits, so reads see
// every earlier line and event seqs follow line order.
func (c *creator) bulkable(sp Spec, enqueue bool) bool {
	return !noBulk && enqueue && sp.ID == "" && sp.Key == "" && len(sp.After) == 0 && !sp.Unique
}

// flush writes the pending tasks and their two events each (created into
// inbox, then the gateway step) with one multi-row INSERT into events and
// one into tasks: the same rows, in the same order, as createEnqueued
// writes one by one, for a fraction of the statements and bound values.
// Events get consecutive seqs in VALUES order (AUTOINCREMENT under the
// write lock), so each task's seq, its gateway event's, is computed from
// the last one.
func (c *creator) flush(ctx context.Context) error {
	n := len(c.pending)
	if n == 0 {
		return nil
	}
	defer func() { c.pending = c.pending[:0] }()
	ts := FormatTime(c.now)
	q := bulkQueries(n)
	args := make([]any, 0, 1+bulkTaskArgs*n)
	args = append(args, ts)
	for _, t := range c.pending {
		args = append(args, t.ID, t.State)
	}
	if err := c.tx.Flush(); err != nil {
		return err
	}
	res, err := c.tx.ExecMany(ctx, q.events, args...)
	if err != nil {
		return err
	}
	last, err := res.LastInsertId()
	if err != nil {
		return err
	}
	args = args[:1]
	for i, t := range c.pending {
		var todoAt any
		if t.State == TaskTodo {
			todoAt = ts
		}
		seq := last - int64(2*(n-1-i))
		args = append(args, t.ID, t.State, t.Queue, t.Priority, seq, t.Spec, boolInt(t.Hold),
			nullable(t.NotBefore), nullable(t.NotBeforeWhy), nullable(t.BlockedReason), todoAt)
	}
	return c.tx.Run(q.tasks, args...)
}

// bulkTaskArgs is how many values flush binds per task in the tasks
// INSERT (the time, ?1, is shared by every row of both statements).
const bulkTaskArgs = 11

// bulkSQL is the text of flush's two INSERTs for one number of tasks.
type bulkSQL struct{ events, tasks string }

var (
	bulkMu    sync.Mutex
	bulkCache = map[int]bulkSQL{}
)

// bulkQueries returns flush's statements for n tasks, built once per n
// (almost always bulkRows, and the remainder of a batch): the same text
// each time, so the connection's statement cache prepares it once. At
// most 16 sizes are kept (about 40 KB of text each at bulkRows).
func bulkQueries(n int) bulkSQL {
	bulkMu.Lock()
	defer bulkMu.Unlock()
	if q, ok := bulkCache[n]; ok {
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
		// Tasks: ?1 the time, then bulkTaskArgs values per task.
		b := 2 + bulkTaskArgs*i
		fmt.Fprintf(&tk, "(?%d,?%d,?%d,?%d,?%d,1,?%d,?%d,?%d,?%d,?%d,?%d,?1,?1)",
			b, b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8, b+9, b+10)
	}
	q := bulkSQL{events: ev.String(), tasks: tk.String()}
	if len(bulkCache) < 16 {
		bulkCache[n] = q
	}
	return q
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func newCreator(tx *sqlite.Tx, now time.Time) *creator {
	return &creator{tx: tx, now: now, queues: map[string]bool{}}
}

// create stores one normalised spec inside the creator's transaction.
func (c *creator) create(ctx context.Context, sp Spec, enqueue bool) (Created, error) {
	tx, now := c.tx, c.now
	canon := sp.Canonical()
	if sp.ID != "" {
		var spec, state string
		err := tx.QueryRowContext(ctx, `SELECT spec, state FROM tasks WHERE id = ?`, sp.ID).Scan(&spec, &state)
		switch {
		case err == nil && SameSpec(spec, canon):
			return Created{ID: sp.ID, State: state}, nil
		case err == nil:
			return Created{}, conflictf("task %s already exists with a different spec", sp.ID)
		case !errors.Is(err, sql.ErrNoRows):
			return Created{}, err
		}
	} else {
		sp.ID = NewID(now)
	}

	depsLeft, deadDep := 0, false
	for _, dep := range sp.After {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM tasks WHERE id = ?`, dep).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return Created{}, notFoundf("--after: no task %q", dep)
		}
		if err != nil {
			return Created{}, err
		}
		if state != TaskDone {
			depsLeft++
		}
		if state == TaskFailed || state == TaskCancelled {
			deadDep = true
		}
	}

	if sp.Unique {
		h, err := tx.TaskKeyHolder(ctx, sp.Key, sp.ID)
		if err != nil {
			return Created{}, err
		}
		if h != nil {
			return Created{}, &Error{Kind: Conflict, Existing: h.ID, ExistingState: h.State,
				Msg: fmt.Sprintf("key %q is held by task %s (--unique)", sp.Key, h.ID)}
		}
	}

	if !c.queues[sp.Queue] {
		if err := ensureQueue(ctx, tx, now, sp.Queue); err != nil {
			return Created{}, err
		}
		c.queues[sp.Queue] = true
	}

	prio, _ := ParsePriority(sp.Priority)
	nb := sp.NotBefore(now)
	t := &taskRow{
		ID: sp.ID, State: TaskInbox, Queue: sp.Queue, Key: sp.Key, Priority: prio, Spec: canon,
		Unique: sp.Unique, Hold: sp.Hold, DepsLeft: depsLeft,
	}
	if !nb.IsZero() {
		t.NotBefore, t.NotBeforeWhy = FormatTime(nb), BlockedScheduled
	}
	if enqueue && !deadDep {
		return c.createEnqueued(ctx, t, sp.After)
	}
	ts := FormatTime(now)
	_, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, state, queue, key, priority, spec, is_unique, hold, deps_left,
		not_before, not_before_why, created_at, updated_at) VALUES (?, 'inbox', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Queue, nullable(t.Key), t.Priority, t.Spec, t.Unique, t.Hold, t.DepsLeft,
		nullable(t.NotBefore), nullable(t.NotBeforeWhy), ts, ts)
	if err != nil {
		return Created{}, err
	}
	for i, dep := range sp.After {
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_deps (task_id, dep_id, pos) VALUES (?, ?, ?)`, t.ID, dep, i); err != nil {
			return Created{}, err
		}
	}
	if err := addEvent(ctx, tx, now, event{Kind: "task.created", TaskID: t.ID, To: TaskInbox}); err != nil {
		return Created{}, err
	}
	// A task created into inbox stays there, unless a dependency already
	// ended failed or cancelled: then it is cancelled at once, as the
	// cascade would have cancelled it in inbox (section 2).
	if !enqueue && !deadDep {
		return Created{ID: t.ID, State: TaskInbox, New: true}, nil
	}
	to, err := enterLane(ctx, tx, now, t, "", len(sp.After) > 0)
	if err != nil {
		return Created{}, err
	}
	return Created{ID: t.ID, State: to, New: true}, nil
}

// createEnqueued is create-and-enqueue in one step, the common case (no
// dependency already failed): the task row is written once, in its final
// state, after the two events that record the path (created into inbox,
// then the gateway step), instead of an insert followed by a CAS update.
// The result is the same row and the same events as creating into inbox
// and then enqueueing.
func (c *creator) createEnqueued(ctx context.Context, t *taskRow, after []string) (Created, error) {
	tx, now := c.tx, c.now
	br := blockedReason(t.Hold, t.DepsLeft, t.NotBefore, t.NotBeforeWhy, now)
	to := TaskTodo
	if br != "" {
		to = TaskBlocked
	}
	if c.bulk {
		t.State, t.BlockedReason = to, br
		c.pending = append(c.pending, t)
		return Created{ID: t.ID, State: to, New: true}, nil
	}
	free, err := laneIsFree(ctx, tx, t.Key, t.ID)
	if err != nil {
		return Created{}, err
	}
	// The task's seq is its gateway event's: the events pending are
	// written first, then the two of this task in one statement.
	if err := tx.Flush(); err != nil {
		return Created{}, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO events (at, kind, task_id, from_state, to_state)
		VALUES (?1, 'task.created', ?2, NULL, 'inbox'), (?1, 'task.' || ?3, ?2, 'inbox', ?3)`,
		FormatTime(now), t.ID, to)
	if err != nil {
		return Created{}, err
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return Created{}, err
	}
	var todoAt any
	if to == TaskTodo {
		todoAt = FormatTime(now)
	}
	ts := FormatTime(now)
	_, err = tx.ExecContext(ctx, `INSERT INTO tasks (id, state, queue, key, priority, seq, lane_head, spec, is_unique, hold,
		deps_left, not_before, not_before_why, blocked_reason, todo_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, to, t.Queue, nullable(t.Key), t.Priority, seq, free, t.Spec, t.Unique, t.Hold,
		t.DepsLeft, nullable(t.NotBefore), nullable(t.NotBeforeWhy), nullable(br), todoAt, ts, ts)
	if err != nil {
		return Created{}, err
	}
	for i, dep := range after {
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_deps (task_id, dep_id, pos) VALUES (?, ?, ?)`, t.ID, dep, i); err != nil {
			return Created{}, err
		}
	}
	return Created{ID: t.ID, State: to, New: true}, nil
}
