package queue

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// ClaimParams says who claims and from where.
type ClaimParams struct {
	Worker string
	Host   string
	Queues []string // empty: all
	Lease  time.Duration
}

// Claimed is a task a worker now owns through a run and its lease.
type Claimed struct {
	TaskID       string
	RunID        string
	Token        string
	Attempt      int
	Queue        string
	Spec         Spec
	LeaseExpires time.Time
	// Timeout is the run time limit: the task's, else its queue's; 0 = none.
	Timeout time.Duration
}

// queueRow is a queues row's settings.
type queueRow = store.Queue

func getQueue(ctx context.Context, q store.Reader, name string) (*queueRow, error) {
	row, err := q.QueueGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		// A queue always has a row once a task names it; defaults otherwise.
		return &queueRow{Name: name, Retries: 0, BackoffMS: 30000, TransientRetries: 3, TimeoutRetries: 1,
			StartTimeoutMS: 600000, WarnAfterMS: 600000}, nil
	}
	return row, err
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Claim takes the next runnable task (highest priority, then oldest) from
// a queue that is not paused and below its concurrency, counted across all
// workers, that is the head of its key lane. It moves the task todo →
// doing and creates its run (queued) with a lease, in one transaction. It
// returns nil when nothing is runnable.
//
// The claim reads only the runnable lane heads of each queue, so its cost
// does not grow with tasks waiting behind busy lanes or in paused queues.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (*Claimed, error) {
	cs, err := s.ClaimN(ctx, p, 1)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return cs[0], nil
}

// ClaimN claims up to n tasks, as Claim does, in one transaction.
func (s *Store) ClaimN(ctx context.Context, p ClaimParams, n int) ([]*Claimed, error) {
	var out []*Claimed
	// s.st.Write, not s.write, on the paths a worker takes for each task:
	// a closure fewer is an allocation fewer per transaction.
	err := s.st.Write(ctx, func(tx store.Tx) error {
		var err error
		out, err = claimTx(ctx, tx, s.leaseNow(s.now()), p, n)
		return err
	})
	return out, err
}

// claimTx claims up to n tasks inside tx.
//
// The claimable queues and their live-run counts are read once, then each
// queue's next runnable tasks, up to n and its room, in one read: a claim
// does not move a lane (its next task becomes the head only once the
// claimed one ends), so a queue's first k heads are its next k claims.
// The queues' lists merge by priority, then seq, and the first n are
// claimed at once.
func claimTx(ctx context.Context, tx store.Tx, ln leaseNow, p ClaimParams, n int) ([]*Claimed, error) {
	if p.Lease <= 0 {
		p.Lease = 90 * time.Second
	}
	if n <= 0 {
		return nil, nil
	}
	qs, err := tx.ClaimQueues(ctx, p.Queues)
	if err != nil {
		return nil, err
	}
	var heads []store.ClaimHead
	for i := range qs {
		// A queue at its concurrency (counted across all workers) gives
		// nothing; one below it at most the runs it may still start.
		want := n
		if q := &qs[i]; q.Concurrency > 0 {
			if q.Live >= q.Concurrency {
				continue
			}
			want = min(want, q.Concurrency-q.Live)
		}
		if heads, err = tx.ClaimHeads(ctx, qs[i].Name, want, heads); err != nil {
			return nil, err
		}
	}
	if len(qs) > 1 {
		slices.SortStableFunc(heads, func(a, b store.ClaimHead) int {
			if a.Priority != b.Priority {
				return cmp.Compare(a.Priority, b.Priority)
			}
			return cmp.Compare(a.Seq, b.Seq)
		})
	}
	if len(heads) > n {
		heads = heads[:n]
	}
	if len(heads) == 0 {
		return nil, nil
	}
	return claimAll(ctx, tx, ln, p, qs, heads)
}

// claimAll claims heads: each task todo → doing, and its run, queued,
// with one event for each.
func claimAll(ctx context.Context, tx store.Tx, ln leaseNow, p ClaimParams, qs []store.ClaimQueue, heads []store.ClaimHead) ([]*Claimed, error) {
	now := ln.wall
	out := make([]*Claimed, len(heads))
	runs := make([]store.ClaimRun, len(heads))
	for i := range heads {
		h := &heads[i]
		c := &Claimed{TaskID: h.ID, RunID: NewID(now), Token: newToken(), Attempt: h.Attempts + 1, Queue: h.Queue,
			LeaseExpires: now.Add(p.Lease)}
		_ = json.Unmarshal([]byte(h.Spec), &c.Spec)
		c.Spec.ID = h.ID
		if c.Spec.Timeout != "" {
			c.Timeout, _ = ParseDuration(c.Spec.Timeout)
		} else {
			c.Timeout = time.Duration(claimQueue(qs, h.Queue).TimeoutMS) * time.Millisecond
		}
		out[i] = c
		runs[i] = store.ClaimRun{TaskID: c.TaskID, RunID: c.RunID, Token: c.Token, Queue: c.Queue, Attempt: c.Attempt,
			Probe: c.Spec.Probe}
	}
	if err := tx.ClaimTasks(ctx, store.Claim{At: FormatTime(now), Worker: p.Worker, Host: p.Host,
		Lease: ln.grant(p.Lease), ClaimedNS: ln.claimedAt(), Runs: runs}); err != nil {
		return nil, err
	}
	// run.queued's data, {"attempt":N,"worker":W} as json.Marshal writes
	// a map (keys sorted), encoded here once for every claim.
	w, err := json.Marshal(p.Worker)
	if err != nil {
		return nil, err
	}
	for _, c := range out {
		if err := addEvent(ctx, tx, now, event{Kind: "task." + TaskDoing, TaskID: c.TaskID, From: TaskTodo, To: TaskDoing}); err != nil {
			return nil, err
		}
		if err := addEvent(ctx, tx, now, event{Kind: "run.queued", TaskID: c.TaskID, RunID: c.RunID, To: RunQueued,
			Data: rawJSON(`{"attempt":` + strconv.Itoa(c.Attempt) + `,"worker":` + string(w) + `}`)}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimQueue is the queue name among qs.
func claimQueue(qs []store.ClaimQueue, name string) *store.ClaimQueue {
	for i := range qs {
		if qs[i].Name == name {
			return &qs[i]
		}
	}
	return &store.ClaimQueue{}
}
