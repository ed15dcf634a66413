package queue

import (
	"context"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Queue is a queue's settings and live counts as cq prints them.
type Queue struct {
	Name             string  `json:"name"`
	Paused           bool    `json:"paused"`
	Concurrency      int     `json:"concurrency"`
	Retries          int     `json:"retries"`
	Backoff          string  `json:"backoff"`
	TransientRetries int     `json:"transient_retries"`
	TimeoutRetries   int     `json:"timeout_retries"`
	Timeout          *string `json:"timeout"` // null: no run time limit
	StartTimeout     string  `json:"start_timeout"`
	WarnAfter        string  `json:"warn_after"`
	// TimeoutCountsAsks: the time its runs wait for answers (cq ask)
	// counts toward their time limit (by default it does not).
	TimeoutCountsAsks bool `json:"timeout_counts_asks"`
	Backlog           int  `json:"backlog"`
	Running           int  `json:"running"`
}

// QueueSettings are the settable fields of a queue; nil leaves a field as
// it is.
type QueueSettings struct {
	Concurrency      *int
	Retries          *int
	Backoff          *time.Duration
	TransientRetries *int
	TimeoutRetries   *int
	Timeout          *time.Duration
	StartTimeout     *time.Duration
	WarnAfter        *time.Duration
	Paused           *bool
	// TimeoutCountsAsks: see Queue.
	TimeoutCountsAsks *bool
}

func msString(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// Queues lists every queue with its backlog (todo tasks) and running count.
func (s *Store) Queues(ctx context.Context) ([]Queue, error) {
	qs, err := s.st.QueueListWithCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Queue, len(qs))
	for i := range qs {
		q := &qs[i]
		out[i] = Queue{Name: q.Name, Paused: q.Paused, Concurrency: q.Concurrency, Retries: q.Retries,
			Backoff: msString(q.BackoffMS), TransientRetries: q.TransientRetries, TimeoutRetries: q.TimeoutRetries,
			StartTimeout: msString(q.StartTimeoutMS), WarnAfter: msString(q.WarnAfterMS), TimeoutCountsAsks: q.TimeoutCountsAsks,
			Backlog: q.Backlog, Running: q.Running}
		if q.TimeoutMS > 0 {
			t := msString(q.TimeoutMS)
			out[i].Timeout = &t
		}
	}
	return out, nil
}

// QueueCountsAsks reports whether queue name's run time limit counts the
// time its runs wait for answers (cq queue set --timeout-counts-asks);
// a queue with no row has the default, false.
func (s *Store) QueueCountsAsks(ctx context.Context, name string) (bool, error) {
	q, err := getQueue(ctx, s.st, name)
	if err != nil {
		return false, err
	}
	return q.TimeoutCountsAsks, nil
}

// SetQueue creates the queue if needed and applies the given settings, in
// one transaction with a queue.updated event.
func (s *Store) SetQueue(ctx context.Context, name string, set QueueSettings) error {
	if !ValidQueueName(name) {
		return invalidf("invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", name)
	}
	u := store.QueueUpdate{Name: name}
	data := map[string]any{}
	addInt := func(bit store.QueueFields, dst *int, field string, v *int) error {
		if v == nil {
			return nil
		}
		if *v < 0 {
			return invalidf("--%s must be 0 or more", strings.ReplaceAll(field, "_", "-"))
		}
		u.Set, *dst = u.Set|bit, *v
		data[field] = *v
		return nil
	}
	addDur := func(bit store.QueueFields, dst *int64, field string, v *time.Duration, allowZero bool) error {
		if v == nil {
			return nil
		}
		if *v < 0 || (!allowZero && *v == 0) {
			return invalidf("--%s must be positive", strings.ReplaceAll(field, "_", "-"))
		}
		u.Set, *dst = u.Set|bit, v.Milliseconds()
		data[field] = v.String()
		return nil
	}
	for _, err := range []error{
		addInt(store.SetQueueConcurrency, &u.Concurrency, "concurrency", set.Concurrency),
		addInt(store.SetQueueRetries, &u.Retries, "retries", set.Retries),
		addDur(store.SetQueueBackoff, &u.BackoffMS, "backoff", set.Backoff, false),
		addInt(store.SetQueueTransientRetries, &u.TransientRetries, "transient_retries", set.TransientRetries),
		addInt(store.SetQueueTimeoutRetries, &u.TimeoutRetries, "timeout_retries", set.TimeoutRetries),
		addDur(store.SetQueueTimeout, &u.TimeoutMS, "timeout", set.Timeout, true),
		addDur(store.SetQueueStartTimeout, &u.StartTimeoutMS, "start_timeout", set.StartTimeout, false),
		addDur(store.SetQueueWarnAfter, &u.WarnAfterMS, "warn_after", set.WarnAfter, false),
	} {
		if err != nil {
			return err
		}
	}
	if set.TimeoutCountsAsks != nil {
		u.Set, u.TimeoutCountsAsks = u.Set|store.SetQueueTimeoutCountsAsks, *set.TimeoutCountsAsks
		data["timeout_counts_asks"] = *set.TimeoutCountsAsks
	}
	kind := "queue.updated"
	if set.Paused != nil {
		u.Set, u.Paused = u.Set|store.SetQueuePaused, *set.Paused
		kind = "queue.resumed"
		if *set.Paused {
			kind = "queue.paused"
		}
	}
	return s.write(ctx, func(tx store.Tx, now time.Time) error {
		if err := ensureQueue(ctx, tx, now, name); err != nil {
			return err
		}
		if u.Set == 0 {
			// No setting given: the queue exists now, nothing changed.
			return nil
		}
		// Only a change is recorded: pausing a paused queue, resuming a
		// running one or setting what is already set records nothing.
		u.At = FormatTime(now)
		if changed, err := tx.QueueUpdate(ctx, u); err != nil || !changed {
			return err
		}
		data["queue"] = name
		return addEvent(ctx, tx, now, event{Kind: kind, Data: data})
	})
}

// ClearQueueStart checks that the queue exists and returns the position
// bound of a clear (store.TaskLastPos): the tasks stored when it began (ClearQueueStep never
// goes past it, so producers adding to the queue cannot keep a clear
// going forever).
func (s *Store) ClearQueueStart(ctx context.Context, name string) (ClearBound, error) {
	var b ClearBound
	if !ValidQueueName(name) {
		return b, invalidf("invalid queue name %q", name)
	}
	exists, err := s.st.QueueExists(ctx, name)
	if err != nil {
		return b, err
	}
	if !exists {
		return b, notFoundf("no queue %q", name)
	}
	b.Began = FormatTime(s.now())
	if b.Upto, err = s.st.TaskLastPos(ctx); err != nil {
		return b, err
	}
	return b, nil
}

// ClearBound is where a queue clear stops: the positions stored when it
// began, and among them only tasks created by then (a position freed by
// a cleanup since may be taken by a new task).
type ClearBound struct {
	Upto  int64
	Began string
}

// clearWindow bounds how many rows one ClearQueueStep reads, so that a
// step holds the write lock briefly even where the queue's tasks are few
// among many.
const clearWindow = 20000

// ClearQueueStep cancels, in one transaction, up to limit tasks of the
// queue that are inbox, todo or blocked, with their dependents, reading
// the tasks after position after in position order (up to clearWindow
// of them, and never past the bound). It returns the tasks it cancelled,
// dependents included (their ids, in the order they were cancelled),
// and the position to go on after, 0 when it reached
// the bound. A clear is a series of such
// steps, so that other writers get the lock between them (see
// maintenance.ClearQueue); a task that starts meanwhile keeps running.
func (s *Store) ClearQueueStep(ctx context.Context, name string, after int64, bound ClearBound, limit int) ([]string, int64, error) {
	var cancelled []string
	next := int64(0)
	upto := bound.Upto
	end := min(after+clearWindow, upto)
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		cancelled, next = nil, 0
		seq0, err := tx.EventLastSeq(ctx)
		if err != nil {
			return err
		}
		ids, last, err := tx.TaskClearable(ctx, store.TaskClearScan{Queue: name, After: after, Upto: end, CreatedBy: bound.Began, Limit: limit})
		if err != nil {
			return err
		}
		for _, id := range ids {
			// Re-read: an earlier cancel may have cancelled it as a dependent.
			t, err := getTask(ctx, tx, id)
			if err != nil {
				return err
			}
			if TaskTerminal(t.State) || t.State == TaskDoing {
				continue
			}
			if err := cancelTask(ctx, tx, now, t, "queue "+name+" cleared"); err != nil {
				return err
			}
		}
		// Read from the events: a cancel takes its dependents with it,
		// in this queue or another.
		cancelled, err = tx.EventCancelledTasks(ctx, seq0)
		if err != nil {
			return err
		}
		switch {
		case len(ids) == limit:
			next = last
		case end < upto:
			next = end
		}
		return nil
	})
	return cancelled, next, err
}
