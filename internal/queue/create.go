package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
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

// CreateOptions says what to do with new tasks.
type CreateOptions struct {
	// Enqueue passes new tasks through the gateway step at once (todo or
	// blocked) instead of leaving them in inbox.
	Enqueue bool
}

// Create stores specs in one transaction: all or nothing. A failure of a
// spec is returned as a *LineError carrying its 1-based position. Specs
// must be normalised already; an --after id must be exact.
func (s *Store) Create(ctx context.Context, specs []Spec, opt CreateOptions) ([]Created, error) {
	out := make([]Created, 0, len(specs))
	err := s.write(ctx, func(tx *sql.Tx, now time.Time) error {
		out = out[:0]
		c := newCreator(tx, now)
		for i, sp := range specs {
			r, err := c.create(ctx, sp, opt.Enqueue)
			if err != nil {
				return &LineError{Line: i + 1, Err: err}
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// creator carries per-transaction caches for a run of creates.
type creator struct {
	tx     *sql.Tx
	now    time.Time
	queues map[string]bool
}

func newCreator(tx *sql.Tx, now time.Time) *creator {
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
		case err == nil && spec == canon:
			return Created{ID: sp.ID, State: state}, nil
		case err == nil:
			return Created{}, conflictf("task %s already exists with a different spec", sp.ID)
		case !errors.Is(err, sql.ErrNoRows):
			return Created{}, err
		}
	} else {
		sp.ID = NewID(now)
	}

	depsLeft := 0
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
	}

	if sp.Unique {
		var other string
		err := tx.QueryRowContext(ctx, `SELECT id FROM tasks WHERE key = ? AND state IN ('inbox','todo','blocked','doing') LIMIT 1`, sp.Key).Scan(&other)
		if err == nil {
			return Created{}, &Error{Code: CodeConflict, Existing: other,
				Msg: fmt.Sprintf("key %q is held by task %s (--unique)", sp.Key, other)}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Created{}, err
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
	if !enqueue {
		return Created{ID: t.ID, State: TaskInbox, New: true}, nil
	}
	to, err := enterLane(ctx, tx, now, t, "", len(sp.After) > 0)
	if err != nil {
		return Created{}, err
	}
	return Created{ID: t.ID, State: to, New: true}, nil
}
