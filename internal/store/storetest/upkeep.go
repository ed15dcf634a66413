package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// spanOf is where a task's events lie, by TaskDelete's contract, and
// whether it has any of those events.
func spanOf(evs []store.EventRecord) (store.EventSpan, bool) {
	var sp store.EventSpan
	found := false
	for _, ev := range evs {
		terminal := ev.Kind == "task.done" || ev.Kind == "task.failed" || ev.Kind == "task.cancelled"
		if ev.Kind != "task.created" && !terminal {
			continue
		}
		if !found || ev.Seq < sp.First {
			sp.First = ev.Seq
		}
		found = true
		if terminal && ev.Seq > sp.End {
			sp.End = ev.Seq
		}
	}
	return sp, found
}

// testTaskDelete: TaskDelete deletes the tasks still in the state given,
// with their own dependency edges, and returns where their events lie;
// their dependents remember how they ended; the expired reads find them
// first, and EventSweep then deletes their events, and no other: those
// of stored tasks and of no task stay.
func testTaskDelete(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"d-done", "d-failed", "d-live", "hand", "own"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		if err := tx.TaskCreateInbox(ctx, store.Task{ID: "noev", Queue: "q", Spec: "{}"}, at(0)); err != nil {
			return err
		}
		if err := tx.EventAdd(ctx, store.Event{At: at(0), Kind: "queue.paused", Data: `{"queue":"q"}`}); err != nil {
			return err
		}
		for id, deps := range map[string][]string{"w1": {"d-failed", "d-done"}, "w2": {"d-done"}} {
			if err := tx.TaskCreateInbox(ctx, store.Task{ID: id, Queue: "q", Spec: "{}", DepsLeft: len(deps)}, at(0)); err != nil {
				return err
			}
			if err := tx.TaskDepsAdd(ctx, id, deps); err != nil {
				return err
			}
		}
		if err := tx.TaskDepsAdd(ctx, "own", []string{"d-live"}); err != nil {
			return err
		}
		if err := finish(tx, "d-done", "todo", "done", at(1)); err != nil {
			return err
		}
		if err := finish(tx, "d-failed", "todo", "failed", at(1)); err != nil {
			return err
		}
		// Set done by hand, with no event.
		for id, from := range map[string]string{"hand": "todo", "noev": "inbox"} {
			if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id, From: from, To: "done", At: at(2), Set: store.SetFinishedAt, FinishedAt: at(2)}); !ok || err != nil {
				return fmt.Errorf("%s to done: %v, %w", id, ok, err)
			}
		}
		if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: "noev", From: "done", To: "done", At: at(3), Set: store.SetFinishedAt, FinishedAt: at(3)}); !ok || err != nil {
			return fmt.Errorf("noev: %v, %w", ok, err)
		}
		return finish(tx, "own", "todo", "done", at(4))
	})
	// The expired reads.
	if n, err := e.s.TaskExpiredCount(ctx, "done", at(3)); n != 2 || err != nil {
		t.Errorf("TaskExpiredCount(done, %s) = %d, %v; want 2", at(3), n, err)
	}
	var each []string
	if err := e.s.TaskExpiredEach(ctx, "done", at(4), func(id string) error { each = append(each, id); return nil }); err != nil ||
		!slices.Equal(each, []string{"d-done", "hand", "noev"}) {
		t.Errorf("TaskExpiredEach(done, %s) = %v, %v; want [d-done hand noev]", at(4), each, err)
	}
	errStop := errors.New("stop")
	calls := 0
	if err := e.s.TaskExpiredEach(ctx, "done", at(9), func(string) error { calls++; return errStop }); !errors.Is(err, errStop) || calls != 1 {
		t.Errorf("TaskExpiredEach went on after fn's error: %d calls, %v", calls, err)
	}
	list, err := e.s.TaskExpiredList(ctx, "done", at(9), 3)
	if slices.Sort(list); err != nil || len(list) != 3 || len(slices.Compact(list)) != 3 {
		t.Errorf("TaskExpiredList(done, %s, 3) = %v, %v", at(9), list, err)
	}
	if list, err := e.s.TaskExpiredList(ctx, "failed", at(9), 10); !slices.Equal(list, []string{"d-failed"}) || err != nil {
		t.Errorf("TaskExpiredList(failed) = %v, %v", list, err)
	}

	wantSpans := map[store.EventSpan]bool{}
	for _, id := range []string{"d-done", "hand", "own", "noev"} {
		if sp, ok := spanOf(e.taskEvents(id)); ok {
			wantSpans[sp] = true
		}
	}
	if len(wantSpans) != 3 {
		t.Fatalf("spans %v: the set-up is wrong", wantSpans)
	}
	var deleted []string
	var spans []store.EventSpan
	e.write(func(tx store.Tx) error {
		var err error
		deleted, spans, err = tx.TaskDelete(ctx, "done", []string{"d-done", "d-live", "hand", "noev", "own", "missing", "d-failed"})
		return err
	})
	gotSpans := map[store.EventSpan]bool{}
	for _, sp := range spans {
		gotSpans[sp] = true
	}
	if slices.Sort(deleted); !slices.Equal(deleted, []string{"d-done", "hand", "noev", "own"}) {
		t.Errorf("deleted %v, want d-done hand noev own", deleted)
	}
	if len(spans) != 3 || !maps.Equal(gotSpans, wantSpans) {
		t.Errorf("spans %v, want %v", spans, wantSpans)
	}
	for _, id := range deleted {
		if _, err := e.s.TaskGet(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TaskGet(%s) after its deletion: %v", id, err)
		}
	}
	for _, id := range []string{"d-live", "d-failed", "w1", "w2"} {
		e.task(id)
	}
	// Its own edges went with own; its dependents' edges stay.
	if deps, err := e.s.TaskDepsOf(ctx, "own"); len(deps) != 0 || err != nil {
		t.Errorf("TaskDepsOf(own) after its deletion = %v, %v", deps, err)
	}
	if deps, err := e.s.TaskDepsOf(ctx, "w1"); !slices.Equal(sorted(deps), []string{"d-done", "d-failed"}) || err != nil {
		t.Errorf("TaskDepsOf(w1) = %v, %v", deps, err)
	}
	if n, err := e.s.TaskDepsNotDone(ctx, "w1"); n != 1 || err != nil {
		t.Errorf("TaskDepsNotDone(w1) = %d, %v; want 1 (d-failed; d-done is deleted)", n, err)
	}
	if dep, state, err := e.s.TaskDeadDependency(ctx, "w2"); dep != "" || err != nil {
		t.Errorf("TaskDeadDependency(w2), its dependency deleted done = %q, %q, %v", dep, state, err)
	}
	e.write(func(tx store.Tx) error {
		_, _, err := tx.TaskDelete(ctx, "failed", []string{"d-failed"})
		return err
	})
	if dep, state, err := e.s.TaskDeadDependency(ctx, "w1"); dep != "d-failed" || state != "failed" || err != nil {
		t.Errorf("TaskDeadDependency(w1), its dependency deleted failed = %q, %q, %v", dep, state, err)
	}
	if n, err := e.s.TaskDepsNotDone(ctx, "w1"); n != 0 || err != nil {
		t.Errorf("TaskDepsNotDone(w1) = %d, %v; want 0", n, err)
	}
	if d, sp, err := func() (d []string, sp []store.EventSpan, err error) {
		e.write(func(tx store.Tx) error { d, sp, err = tx.TaskDelete(ctx, "done", nil); return nil })
		return
	}(); len(d) != 0 || len(sp) != 0 || err != nil {
		t.Errorf("TaskDelete of no ids = %v, %v, %v", d, sp, err)
	}

	// The sweep: every event of a deleted task in the spans, no other.
	before := e.events()
	var want []store.EventRecord
	for _, ev := range before {
		if ev.TaskID == "" || ev.TaskID == "d-live" || ev.TaskID == "w1" || ev.TaskID == "w2" {
			want = append(want, ev)
		}
	}
	last := before[len(before)-1].Seq
	swept := 0
	e.write(func(tx store.Tx) error {
		for _, sp := range spans {
			hi := sp.End
			if hi == 0 {
				hi = last
			}
			n, err := tx.EventSweep(ctx, sp.First, hi)
			if err != nil {
				return err
			}
			swept += n
		}
		return nil
	})
	// d-failed, deleted since, had its events within those spans too.
	if got := e.events(); !slices.Equal(got, want) || swept != len(before)-len(want) {
		t.Errorf("after the sweep (%d deleted) %d events:\n%+v\nwant\n%+v", swept, len(got), got, want)
	}
	e.write(func(tx store.Tx) error {
		if n, err := tx.EventSweep(ctx, 0, last); n != 0 || err != nil {
			return fmt.Errorf("sweeping again deleted %d, %w", n, err)
		}
		return nil
	})
}

// testTaskDepsUpkeep: the maintenance pass's safety nets over the
// dependency edges: windows of them by dependent id, orphans (waiting on
// a dependency that failed or was cancelled), stale counts healed.
func testTaskDepsUpkeep(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for id, end := range map[string]string{"a": "done", "f": "failed", "c": "cancelled", "gone": "done", "l": ""} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
			if end != "" {
				if err := finish(tx, id, "todo", end, at(1)); err != nil {
					return err
				}
			}
		}
		for _, d := range []struct {
			id, state string
			left      int
			deps      []string
		}{
			{"v", "blocked", 2, []string{"c", "a"}},
			{"w", "blocked", 1, []string{"gone"}},
			{"x", "blocked", 1, []string{"a"}},
			{"y", "blocked", 1, []string{"a", "l"}},
			{"z", "inbox", 1, []string{"f"}},
			{"t", "todo", 1, []string{"a"}},
		} {
			var err error
			if d.state == "inbox" {
				err = tx.TaskCreateInbox(ctx, store.Task{ID: d.id, Queue: "q", Spec: "{}", DepsLeft: d.left}, at(2))
			} else {
				err = enqueue(tx, store.Task{ID: d.id, State: d.state, DepsLeft: d.left}, at(2))
			}
			if err != nil {
				return err
			}
			if err := tx.TaskDepsAdd(ctx, d.id, d.deps); err != nil {
				return err
			}
		}
		_, _, err := tx.TaskDelete(ctx, "done", []string{"gone"})
		return err
	})
	for _, c := range []struct {
		after string
		limit int
		last  string
		n     int
	}{{"", 2, "v", 2}, {"v", 3, "y", 3}, {"", 100, "z", 8}, {"z", 10, "", 0}} {
		if last, n, err := e.s.TaskDepsWindow(ctx, c.after, c.limit); last != c.last || n != c.n || err != nil {
			t.Errorf("TaskDepsWindow(%q, %d) = %q, %d, %v; want %q, %d", c.after, c.limit, last, n, err, c.last, c.n)
		}
	}
	orphans := func(lo, hi string, want ...store.TaskOrphan) {
		t.Helper()
		got, err := e.s.TaskOrphans(ctx, lo, hi)
		slices.SortFunc(got, func(a, b store.TaskOrphan) int { return cmpStr(a.ID, b.ID) })
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("TaskOrphans(%q, %q) = %v, %v; want %v", lo, hi, got, err, want)
		}
	}
	orphans("", "z", store.TaskOrphan{ID: "v", Dep: "c", DepState: "cancelled"}, store.TaskOrphan{ID: "z", Dep: "f", DepState: "failed"})
	orphans("v", "z", store.TaskOrphan{ID: "z", Dep: "f", DepState: "failed"})
	orphans("", "u")
	left := func(want map[string]int) {
		t.Helper()
		for id, n := range want {
			if got := e.task(id).DepsLeft; got != n {
				t.Errorf("%s: %d dependencies left, want %d", id, got, n)
			}
		}
	}
	e.write(func(tx store.Tx) error { return tx.TaskDepCountsHeal(ctx, "w", "z") })
	left(map[string]int{"v": 2, "w": 1, "x": 0, "y": 1, "z": 1, "t": 1})
	e.write(func(tx store.Tx) error { return tx.TaskDepCountsHeal(ctx, "", "w") })
	left(map[string]int{"v": 2, "w": 0, "x": 0, "y": 1, "z": 1, "t": 1})
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
