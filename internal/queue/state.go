package queue

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// StateFilter selects what State reads.
type StateFilter struct {
	// All reads every task; otherwise only those not ended (inbox, todo,
	// blocked, doing).
	All bool
	// Queue, when set, keeps only that queue's tasks, its own entry among
	// the queues, and the workers that claim from it.
	Queue string
}

// State is one consistent view of the store (cq state): its tasks,
// queues and workers as they stood after the event Seq and before any
// later one, so that the events after Seq continue it.
type State struct {
	Seq     int64            `json:"seq"`
	Tasks   []*Task          `json:"tasks"`
	Queues  map[string]Queue `json:"queues"`
	Workers []Worker         `json:"workers"`
}

// State reads one snapshot of the store: what StateEach reads, with the
// tasks gathered.
func (s *Store) State(ctx context.Context, f StateFilter) (*State, error) {
	var out *State
	err := s.StateEach(ctx, f, func(head *State) error {
		out = head
		out.Tasks = []*Task{}
		return nil
	}, func(t *Task) error {
		out.Tasks = append(out.Tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StateEach reads one snapshot of the store (store.Reader's Snapshot):
// head is called first with its seq (the newest event it includes), its
// queues and its workers (Tasks nil), then each with each task f
// selects, newest first, as List gives them; an error of either stops
// the read and is returned. Everything comes from the one snapshot,
// whatever commits meanwhile, so a task is in the state the events up to
// Seq left it in, and the events after Seq are the changes that follow.
// The tasks are not gathered: a store of a million tasks streams.
func (s *Store) StateEach(ctx context.Context, f StateFilter, head func(*State) error, each func(*Task) error) error {
	return s.st.Snapshot(ctx, func(r store.Reader) error {
		v := s.reading(r)
		seq, err := r.EventLastSeq(ctx)
		if err != nil {
			return err
		}
		qs, err := v.Queues(ctx)
		if err != nil {
			return err
		}
		ws, err := v.Workers(ctx)
		if err != nil {
			return err
		}
		st := &State{Seq: seq, Queues: make(map[string]Queue, len(qs)), Workers: make([]Worker, 0, len(ws))}
		for _, q := range qs {
			if f.Queue == "" || q.Name == f.Queue {
				st.Queues[q.Name] = q
			}
		}
		for _, w := range ws {
			if f.Queue == "" || len(w.Queues) == 0 || slices.Contains(w.Queues, f.Queue) {
				st.Workers = append(st.Workers, w)
			}
		}
		if err := head(st); err != nil {
			return err
		}
		lf := ListFilter{Queue: f.Queue}
		if !f.All {
			lf.States = []string{TaskInbox, TaskTodo, TaskBlocked, TaskDoing}
		}
		return v.ListEach(ctx, lf, each)
	})
}

// reading is a Store whose reads are r's (a snapshot, see StateEach),
// so that the views the Store builds (List, Queues, Workers) are built
// from it unchanged; it writes nothing, and is used only while r is.
func (s *Store) reading(r store.Reader) *Store {
	v := *s
	v.st = snapshotStore{Reader: r, Host: s.st}
	return &v
}

// errSnapshotWrite is what a write through a snapshot's Store returns.
var errSnapshotWrite = errors.New("queue: a snapshot is read-only")

// snapshotStore is a store.Store over one snapshot's Reader: the reads
// are the snapshot's, the host the store's, and writes are refused.
type snapshotStore struct {
	store.Reader
	store.Host
}

func (snapshotStore) Write(context.Context, func(store.Tx) error) error { return errSnapshotWrite }

func (snapshotStore) WriteWithin(context.Context, time.Duration, func(store.Tx) error) error {
	return errSnapshotWrite
}
