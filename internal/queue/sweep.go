package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// A cleanup deletes the events of the tasks it deletes in two steps, so
// that no event write pays for an index of every event by its task. The
// transaction that deletes a batch of tasks notes, in system_state, the
// window of event seqs that holds each task's events (store.EventSpan).
// SweepEvents then walks the noted windows a slice at a time and deletes
// the events in them whose task is gone. The windows are kept in the
// store, so a cleanup killed in between leaves the sweep to the next one;
// two cleanups at once share them.

// sweepKey is the system_state key of the windows still to sweep, a JSON
// array of [lo, hi] seq pairs, sorted and disjoint.
const sweepKey = "events_sweep"

// SweepSlice bounds the seqs one SweepEvents transaction looks at: a few
// milliseconds of the write lock.
const SweepSlice = 5000

// sweepGap is how far apart two windows may be and still be noted as
// one: the events between them are read for nothing, but the list stays
// short when a batch's tasks are spread over the log. sweepMax bounds the
// list; past it, the two closest windows merge.
const (
	sweepGap = 2000
	sweepMax = 256
)

type seqWindow [2]int64

// noteEventWindows adds the event windows of deleted tasks, spans of
// deleted of them (see store.TaskDelete), to the windows still to sweep.
func noteEventWindows(ctx context.Context, tx store.Tx, now time.Time, spans []store.EventSpan, deleted int) error {
	var add []seqWindow
	open := int64(0) // the lowest first seq of a task with no terminal event
	for _, sp := range spans {
		if sp.End == 0 {
			if open == 0 || sp.First < open {
				open = sp.First
			}
			continue
		}
		add = append(add, seqWindow{sp.First, sp.End})
	}
	if len(spans) < deleted {
		open = 1 // a task without task.created: its events may be anywhere
	}
	if open > 0 {
		last, err := tx.EventLastSeq(ctx)
		if err != nil {
			return err
		}
		add = append(add, seqWindow{open, last})
	}
	have, err := sweepWindows(ctx, tx)
	if err != nil {
		return err
	}
	return saveSweepWindows(ctx, tx, now, mergeWindows(append(have, add...)))
}

// sweepWindows reads the windows still to sweep. A value that does not
// parse (written by hand) stands for the whole log.
func sweepWindows(ctx context.Context, q store.Reader) ([]seqWindow, error) {
	v, ok, err := q.SystemStateGet(ctx, sweepKey)
	if err != nil || !ok {
		return nil, err
	}
	var ws []seqWindow
	if json.Unmarshal([]byte(v), &ws) != nil {
		last, err := q.EventLastSeq(ctx)
		return []seqWindow{{1, last}}, err
	}
	return mergeWindows(ws), nil
}

func saveSweepWindows(ctx context.Context, tx store.Tx, now time.Time, ws []seqWindow) error {
	if len(ws) == 0 {
		return tx.SystemStateDelete(ctx, sweepKey)
	}
	b, err := json.Marshal(ws)
	if err != nil {
		return err
	}
	return tx.SystemStateSet(ctx, sweepKey, string(b), FormatTime(now))
}

// mergeWindows sorts ws and merges those that overlap or lie within
// sweepGap of each other, then the closest ones until at most sweepMax
// are left. Empty windows (lo > hi) are dropped.
func mergeWindows(ws []seqWindow) []seqWindow {
	ws = slices.DeleteFunc(ws, func(w seqWindow) bool { return w[0] > w[1] })
	slices.SortFunc(ws, func(a, b seqWindow) int { return cmp.Compare(a[0], b[0]) })
	out := ws[:0]
	for _, w := range ws {
		if n := len(out); n > 0 && w[0] <= out[n-1][1]+sweepGap {
			out[n-1][1] = max(out[n-1][1], w[1])
			continue
		}
		out = append(out, w)
	}
	for len(out) > sweepMax {
		best := 0
		for i := 1; i < len(out)-1; i++ {
			if out[i+1][0]-out[i][1] < out[best+1][0]-out[best][1] {
				best = i
			}
		}
		out[best][1] = out[best+1][1]
		out = slices.Delete(out, best+1, best+2)
	}
	return out
}

// SweepEvents deletes, in one transaction, the events of deleted tasks
// among the next SweepSlice seqs of the windows cleanup noted. It returns
// how many events it deleted and whether windows are left to sweep.
func (s *Store) SweepEvents(ctx context.Context) (int, bool, error) {
	var n int
	var more bool
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		n, more = 0, false
		ws, err := sweepWindows(ctx, tx)
		if err != nil || len(ws) == 0 {
			return err
		}
		lo, hi := ws[0][0], min(ws[0][1], ws[0][0]+SweepSlice-1)
		if n, err = tx.EventSweep(ctx, lo, hi); err != nil {
			return err
		}
		if ws[0][0] = hi + 1; ws[0][0] > ws[0][1] {
			ws = ws[1:]
		}
		more = len(ws) > 0
		return saveSweepWindows(ctx, tx, now, ws)
	})
	return n, more, err
}
