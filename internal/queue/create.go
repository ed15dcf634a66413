package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cq-dev/cq/internal/store"
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
	// s.st.Write rather than s.write: the callback escapes through the
	// store's interface, and one closure fewer is one allocation fewer
	// per call.
	err := s.st.Write(ctx, func(tx store.Tx) error {
		out = out[:0]
		c := newCreator(tx, s.now())
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
	tx  store.Tx
	now time.Time
	// ts is now as stored.
	ts string
	// queue and queues are the queues ensured in this transaction: the
	// first in queue, so that a batch of one queue needs no map.
	queue  string
	queues map[string]bool
	// pending are created-and-enqueued tasks not written yet (see flush);
	// pendingLine is the batch line of the first of them.
	pending     []*taskRow
	pendingLine int
	// bulk says the spec being created may wait in pending.
	bulk bool
}

// bulkRows is how many tasks wait in pending before a flush writes them.
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
// inbox, then the gateway step) at once: the same rows, in the same
// order, as createEnqueued writes one by one, for a fraction of the
// statements.
func (c *creator) flush(ctx context.Context) error {
	if len(c.pending) == 0 {
		return nil
	}
	defer func() { c.pending = c.pending[:0] }()
	return c.tx.TaskCreateEnqueuedBatch(ctx, c.pending, c.ts)
}

func newCreator(tx store.Tx, now time.Time) *creator {
	return &creator{tx: tx, now: now, ts: FormatTime(now)}
}

// ensureQueue records that a queue exists, once per transaction.
func (c *creator) ensureQueue(ctx context.Context, name string) error {
	if name == c.queue || c.queues[name] {
		return nil
	}
	if err := ensureQueue(ctx, c.tx, c.now, name); err != nil {
		return err
	}
	switch {
	case c.queue == "":
		c.queue = name
	case c.queues == nil:
		c.queues = map[string]bool{name: true}
	default:
		c.queues[name] = true
	}
	return nil
}

// forgetQueues forgets the queues ensured, after a rollback that may have
// undone their rows.
func (c *creator) forgetQueues() { c.queue, c.queues = "", nil }

// create stores one normalised spec inside the creator's transaction.
func (c *creator) create(ctx context.Context, sp Spec, enqueue bool) (Created, error) {
	tx, now := c.tx, c.now
	canon := sp.Canonical()
	if sp.ID != "" {
		spec, state, err := tx.TaskSpec(ctx, sp.ID)
		switch {
		case err == nil && SameSpec(spec, canon):
			return Created{ID: sp.ID, State: state}, nil
		case err == nil:
			return Created{}, conflictf("task %s already exists with a different spec", sp.ID)
		case !errors.Is(err, store.ErrNotFound):
			return Created{}, err
		}
	} else {
		sp.ID = NewID(now)
	}

	depsLeft, deadDep := 0, false
	var states []string
	if len(sp.After) > 0 {
		var err error
		if states, err = tx.TaskDependencyStates(ctx, sp.After); err != nil {
			return Created{}, err
		}
	}
	for i, dep := range sp.After {
		state := states[i]
		if state == "" {
			return Created{}, notFoundf("--after: no task %q", dep)
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

	if err := c.ensureQueue(ctx, sp.Queue); err != nil {
		return Created{}, err
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
	if err := tx.TaskCreateInbox(ctx, *t, c.ts); err != nil {
		return Created{}, err
	}
	if err := tx.TaskDepsAdd(ctx, t.ID, sp.After); err != nil {
		return Created{}, err
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
// dependency already failed): the task is stored once, in its final
// state, with the two events that record the path (created into inbox,
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
	t.State, t.BlockedReason = to, br
	if to == TaskTodo {
		t.TodoAt = c.ts
	}
	if c.bulk {
		c.pending = append(c.pending, t)
		return Created{ID: t.ID, State: to, New: true}, nil
	}
	free, err := laneIsFree(ctx, tx, t.Key, t.ID)
	if err != nil {
		return Created{}, err
	}
	t.LaneHead = free
	if err := tx.TaskCreateEnqueued(ctx, *t, c.ts); err != nil {
		return Created{}, err
	}
	if err := tx.TaskDepsAdd(ctx, t.ID, after); err != nil {
		return Created{}, err
	}
	return Created{ID: t.ID, State: to, New: true}, nil
}
