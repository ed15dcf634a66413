package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// testTaskGetMissing: the reads of one task say ErrNotFound (or nothing)
// for a task that is not stored.
func testTaskGetMissing(t *testing.T, b Backend) {
	e := newEnv(t, b)
	if _, err := e.s.TaskGet(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TaskGet: %v, want ErrNotFound", err)
	}
	if _, err := e.s.TaskState(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TaskState: %v, want ErrNotFound", err)
	}
	if _, _, err := e.s.TaskSpec(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TaskSpec: %v, want ErrNotFound", err)
	}
	if ok, err := e.s.TaskExists(ctx, "nope"); ok || err != nil {
		t.Errorf("TaskExists = %v, %v; want false", ok, err)
	}
	if n, err := e.s.TaskDepsNotDone(ctx, "nope"); n != 0 || err != nil {
		t.Errorf("TaskDepsNotDone = %d, %v; want 0", n, err)
	}
	if dep, state, err := e.s.TaskDeadDependency(ctx, "nope"); dep != "" || state != "" || err != nil {
		t.Errorf("TaskDeadDependency = %q, %q, %v; want none", dep, state, err)
	}
}

// testTaskDependencyStates: the states of the ids asked, in their order,
// "" for one not stored, a repeated id read twice; the same in a
// transaction (where a backend may take locks).
func testTaskDependencyStates(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		if err := tx.TaskCreateInbox(ctx, store.Task{ID: "a", Queue: "q", Spec: spec("a")}, at(0)); err != nil {
			return err
		}
		return tx.TaskCreateEnqueued(ctx, store.Task{ID: "b", State: "todo", Queue: "q", Spec: spec("b"), LaneHead: true, TodoAt: at(0)}, at(0))
	})
	want := []string{"todo", "", "inbox", "todo"}
	got, err := e.s.TaskDependencyStates(ctx, []string{"b", "nope", "a", "b"})
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("TaskDependencyStates = %q, %v; want %q", got, err, want)
	}
	e.write(func(tx store.Tx) error {
		got, err := tx.TaskDependencyStates(ctx, []string{"b", "nope", "a", "b"})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("in a transaction: TaskDependencyStates = %q, %v; want %q", got, err, want)
		}
		return err
	})
}

// testTaskCreateInbox: TaskCreateInbox stores the fields it names, in
// inbox, with no seq, no lane and no event; a second task of the id is an
// error.
func testTaskCreateInbox(t *testing.T, b Backend) {
	e := newEnv(t, b)
	in := store.Task{ID: "a", State: "todo", Queue: "q", Key: "k", Priority: 3, Spec: spec("a"), Unique: true, Hold: true,
		DepsLeft: 2, NotBefore: at(60), NotBeforeWhy: "scheduled",
		// Not read:
		Seq: 7, LaneHead: true, BlockedReason: "x", Reason: "y", Attempts: 1, FailsOther: 1, TodoAt: at(1), FinishedAt: at(2)}
	e.write(func(tx store.Tx) error { return tx.TaskCreateInbox(ctx, in, at(0)) })
	want := store.Task{ID: "a", State: "inbox", Queue: "q", Key: "k", Priority: 3, Spec: spec("a"), Unique: true, Hold: true,
		DepsLeft: 2, NotBefore: at(60), NotBeforeWhy: "scheduled", CreatedAt: at(0), UpdatedAt: at(0)}
	if got := e.task("a"); got != want {
		t.Errorf("stored\n%+v\nwant\n%+v", got, want)
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("events %+v, want none", evs)
	}
	if spec, state, err := e.s.TaskSpec(ctx, "a"); spec != in.Spec || state != "inbox" || err != nil {
		t.Errorf("TaskSpec = %s, %s, %v", spec, state, err)
	}
	err := e.s.Write(ctx, func(tx store.Tx) error {
		return tx.TaskCreateInbox(ctx, store.Task{ID: "a", Queue: "q", Spec: "{}"}, at(1))
	})
	if err == nil {
		t.Error("a second task a was stored")
	}
	if got := e.task("a"); got != want {
		t.Errorf("after the refused second one: %+v", got)
	}
}

// testTaskCreateEnqueued: TaskCreateEnqueued writes its two events after
// those added before in the transaction, and the task with the second's
// seq, in its state, with the fields it names.
func testTaskCreateEnqueued(t *testing.T, b Backend) {
	e := newEnv(t, b)
	in := store.Task{ID: "a", State: "blocked", Queue: "q", Key: "k", Priority: 2, LaneHead: true, Spec: spec("a"), Unique: true,
		Hold: true, DepsLeft: 1, NotBefore: at(60), NotBeforeWhy: "retry", BlockedReason: "hold", TodoAt: at(3),
		// Not read:
		Seq: 99, Reason: "r", Attempts: 4, FailsTimeout: 2, FinishedAt: at(9), CreatedAt: at(8), UpdatedAt: at(8)}
	e.write(func(tx store.Tx) error {
		if err := tx.EventAdd(ctx, store.Event{At: at(0), Kind: "queue.paused"}); err != nil {
			return err
		}
		if err := tx.TaskCreateEnqueued(ctx, in, at(1)); err != nil {
			return err
		}
		return tx.EventAdd(ctx, store.Event{At: at(1), Kind: "after"})
	})
	evs := e.events()
	kinds := []string{}
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	if want := []string{"queue.paused", "task.created", "task.blocked", "after"}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	wantEv := []store.Event{
		{At: at(1), Kind: "task.created", TaskID: "a", To: "inbox"},
		{At: at(1), Kind: "task.blocked", TaskID: "a", From: "inbox", To: "blocked"},
	}
	for i, w := range wantEv {
		if evs[1+i].Event != w {
			t.Errorf("event %d: %+v, want %+v", 1+i, evs[1+i].Event, w)
		}
	}
	want := store.Task{ID: "a", State: "blocked", Queue: "q", Key: "k", Priority: 2, LaneHead: true, Spec: spec("a"),
		Unique: true, Hold: true, DepsLeft: 1, NotBefore: at(60), NotBeforeWhy: "retry", BlockedReason: "hold", TodoAt: at(3),
		CreatedAt: at(1), UpdatedAt: at(1)}
	got := e.task("a")
	if got.Seq <= 0 {
		t.Errorf("seq %d, want a place above 0", got.Seq)
	}
	want.Seq = got.Seq
	if got != want {
		t.Errorf("stored\n%+v\nwant\n%+v", got, want)
	}
	err := e.s.Write(ctx, func(tx store.Tx) error {
		return tx.TaskCreateEnqueued(ctx, store.Task{ID: "a", State: "todo", Queue: "q", Spec: "{}"}, at(2))
	})
	if err == nil {
		t.Error("a second task a was stored")
	}
	if n := len(e.events()); n != 4 {
		t.Errorf("%d events after the refused second task, want 4", n)
	}
}

// testTaskCreateEnqueuedBatch: a batch stores the rows and events that
// one TaskCreateEnqueued per task stores, ignoring the fields it does not
// read; more tasks than a statement takes too.
func testTaskCreateEnqueuedBatch(t *testing.T, b Backend) {
	const n = 300
	mk := func(i int) store.Task {
		id := fmt.Sprintf("t%03d", i)
		tk := store.Task{ID: id, State: "todo", Queue: []string{"q1", "q2", "q3"}[i%3], Priority: i % 4, Spec: spec(id), TodoAt: at(1)}
		switch i % 5 {
		case 1:
			tk.State, tk.Hold, tk.BlockedReason, tk.TodoAt = "blocked", true, "hold", ""
		case 2:
			tk.State, tk.NotBefore, tk.NotBeforeWhy, tk.BlockedReason, tk.TodoAt = "blocked", at(100+i), "scheduled", "scheduled", ""
		case 3:
			tk.NotBefore, tk.NotBeforeWhy = at(i), "retry"
		}
		return tk
	}
	one, many := newEnv(t, b), newEnv(t, b)
	before := store.Event{At: at(0), Kind: "before", Data: `{"x":1}`}
	one.write(func(tx store.Tx) error {
		if err := tx.EventAdd(ctx, before); err != nil {
			return err
		}
		for i := range n {
			tk := mk(i)
			tk.LaneHead = true
			if err := tx.TaskCreateEnqueued(ctx, tk, at(1)); err != nil {
				return err
			}
		}
		return nil
	})
	many.write(func(tx store.Tx) error {
		if err := tx.EventAdd(ctx, before); err != nil {
			return err
		}
		ts := make([]*store.Task, n)
		for i := range ts {
			tk := mk(i)
			// Not read by a batch:
			tk.Key, tk.Unique, tk.DepsLeft, tk.LaneHead = "k", true, 3, false
			ts[i] = &tk
		}
		return tx.TaskCreateEnqueuedBatch(ctx, ts, at(1))
	})
	for i := range n {
		id := mk(i).ID
		if a, b := one.task(id), many.task(id); a != b {
			t.Fatalf("task %s\none by one %+v\nbatched    %+v", id, a, b)
		}
	}
	if a, b := one.events(), many.events(); !reflect.DeepEqual(a, b) {
		t.Fatalf("events differ: %d one by one, %d batched", len(a), len(b))
	}
	var a, bb []string
	for _, e := range []*env{one, many} {
		var got []string
		if err := e.s.TaskListIDs(ctx, store.TaskFilter{}, func(id string) error { got = append(got, id); return nil }); err != nil {
			t.Fatal(err)
		}
		if e == one {
			a = got
		} else {
			bb = got
		}
	}
	if !slices.Equal(a, bb) {
		t.Fatalf("listing order differs:\none by one %v\nbatched    %v", a, bb)
	}
	// And an empty batch stores nothing.
	many.write(func(tx store.Tx) error { return tx.TaskCreateEnqueuedBatch(ctx, nil, at(2)) })
	if got := len(many.events()); got != 1+2*n {
		t.Errorf("%d events after an empty batch, want %d", got, 1+2*n)
	}
}

// fullTask makes a todo task id with every field a TaskUpdate writes set
// (and warned): the start of testTaskUpdateFields.
func fullTask(e *env, id string) store.Task {
	e.t.Helper()
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: id, Key: "k-" + id, Priority: 1, Hold: true, NotBefore: at(50), NotBeforeWhy: "scheduled",
			BlockedReason: "hold"}, at(0)); err != nil {
			return err
		}
		if _, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id, From: "todo", To: "todo", At: at(1),
			Set: store.SetFinishedAt | store.SetReason, FinishedAt: at(2), Reason: "why"}); err != nil {
			return err
		}
		for _, c := range []string{"other", "transient", "transient", "timeout", "timeout", "timeout"} {
			if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id, From: "todo", To: "todo", At: at(1),
				Set: store.SpendFail, FailClass: c}); !ok || err != nil {
				return fmt.Errorf("spend a %s failure: %v, %w", c, ok, err)
			}
		}
		if ok, err := tx.TaskWarnedSet(ctx, id); !ok || err != nil {
			return fmt.Errorf("TaskWarnedSet: %v, %w", ok, err)
		}
		return nil
	})
	return e.task(id)
}

// warned reports whether a todo task is marked warned: TaskWarnedSet
// applies only to one that is not (it is rolled back).
func (e *env) warned(id string) bool {
	e.t.Helper()
	var set bool
	e.tryIn(func(tx store.Tx) error {
		var err error
		set, err = tx.TaskWarnedSet(ctx, id)
		return err
	})
	return !set
}

// applyUpdate is what u makes of t, by TaskUpdate's contract.
func applyUpdate(t store.Task, u store.TaskUpdate) store.Task {
	t.State, t.UpdatedAt = u.To, u.At
	f := u.Set
	if f&store.SetSeq != 0 {
		t.Seq = u.Seq
	}
	if f&store.SetLaneHead != 0 {
		t.LaneHead = u.LaneHead
	}
	if f&store.SetHold != 0 {
		t.Hold = u.Hold
	}
	if f&store.SetBlockedReason != 0 {
		t.BlockedReason = u.BlockedReason
	}
	if f&store.SetNotBefore != 0 {
		t.NotBefore, t.NotBeforeWhy = u.NotBefore, u.NotBeforeWhy
	}
	if f&store.SetTodoAt != 0 {
		t.TodoAt = u.TodoAt
	}
	if f&store.SetFinishedAt != 0 {
		t.FinishedAt = u.FinishedAt
	}
	if f&store.SetReason != 0 {
		t.Reason = u.Reason
	}
	if f&store.ResetFails != 0 {
		t.FailsOther, t.FailsTransient, t.FailsTimeout = 0, 0, 0
	}
	if f&store.SpendFail != 0 {
		switch u.FailClass {
		case "other":
			t.FailsOther++
		case "transient":
			t.FailsTransient++
		case "timeout":
			t.FailsTimeout++
		}
	}
	return t
}

// testTaskUpdateFields: a TaskUpdate writes its state, updated_at and the
// fields its mask names, each bit alone and all together, and nothing
// else; an empty text clears a field.
func testTaskUpdateFields(t *testing.T, b Backend) {
	e := newEnv(t, b)
	type tc struct {
		name string
		set  store.TaskFields
		to   string
		// class is the FailClass of SpendFail; clear gives every text ""
		clear bool
		class string
	}
	cases := []tc{
		{name: "none", to: "todo"},
		{name: "state only", to: "blocked"},
		{name: "all", set: store.TaskFieldsAll &^ store.SpendFail, to: "todo"},
		{name: "all, cleared", set: store.TaskFieldsAll &^ store.SpendFail &^ store.ResetFails, to: "todo", clear: true},
	}
	for bit := store.TaskFields(1); bit <= store.TaskFieldsAll; bit <<= 1 {
		if bit == store.SpendFail {
			for _, c := range []string{"other", "transient", "timeout"} {
				cases = append(cases, tc{name: fmt.Sprintf("SpendFail %s", c), set: bit, to: "todo", class: c})
			}
			continue
		}
		cases = append(cases, tc{name: fmt.Sprintf("bit %#x", uint(bit)), set: bit, to: "todo"})
		if bit == store.SetBlockedReason || bit == store.SetNotBefore || bit == store.SetTodoAt || bit == store.SetFinishedAt || bit == store.SetReason {
			cases = append(cases, tc{name: fmt.Sprintf("bit %#x cleared", uint(bit)), set: bit, to: "todo", clear: true})
		}
	}
	for i, c := range cases {
		id := fmt.Sprintf("t%02d", i)
		before := fullTask(e, id)
		if !e.warned(id) {
			t.Fatalf("%s: TaskWarnedSet did not stick", c.name)
		}
		u := store.TaskUpdate{ID: id, From: "todo", To: c.to, At: at(10), Set: c.set,
			Seq: 1000 + int64(i), LaneHead: false, Hold: false, BlockedReason: "dependency", NotBefore: at(70), NotBeforeWhy: "retry",
			TodoAt: at(11), FinishedAt: at(12), Reason: "because", FailClass: c.class}
		if c.clear {
			u.BlockedReason, u.NotBefore, u.NotBeforeWhy, u.TodoAt, u.FinishedAt, u.Reason = "", "", "", "", "", ""
		}
		var ok bool
		e.write(func(tx store.Tx) error {
			var err error
			ok, err = tx.TaskUpdate(ctx, u)
			return err
		})
		if !ok {
			t.Errorf("%s: the update did not apply", c.name)
			continue
		}
		if got, want := e.task(id), applyUpdate(before, u); got != want {
			t.Errorf("%s (Set %#x):\ngot  %+v\nwant %+v", c.name, uint(c.set), got, want)
		}
		if c.to == "todo" {
			if w, want := e.warned(id), c.set&store.ClearWarned == 0; w != want {
				t.Errorf("%s (Set %#x): warned %v, want %v", c.name, uint(c.set), w, want)
			}
		}
	}
}

// testTaskUpdateStateMismatch: a TaskUpdate from another state than the
// task's, or of no task, reports false and changes nothing.
func testTaskUpdateStateMismatch(t *testing.T, b Backend) {
	e := newEnv(t, b)
	before := fullTask(e, "a")
	for _, u := range []store.TaskUpdate{
		{ID: "a", From: "blocked", To: "todo", At: at(10), Set: store.TaskFieldsAll &^ store.SpendFail, Seq: 5, Reason: "x"},
		{ID: "a", From: "doing", To: "doing", At: at(10), Set: store.SpendFail, FailClass: "other"},
		{ID: "nope", From: "todo", To: "done", At: at(10), Set: store.SetReason, Reason: "x"},
	} {
		var ok bool
		e.write(func(tx store.Tx) error {
			var err error
			ok, err = tx.TaskUpdate(ctx, u)
			return err
		})
		if ok {
			t.Errorf("%+v applied", u)
		}
	}
	if got := e.task("a"); got != before {
		t.Errorf("changed:\ngot  %+v\nwant %+v", got, before)
	}
	if !e.warned("a") {
		t.Error("warned cleared")
	}
}

// testTaskUpdateRace: racers all try the same compare-and-sets (todo to
// doing) of the same tasks, each recording its wins with an event in the
// same transaction: each task is won exactly once.
func testTaskUpdateRace(t *testing.T, b Backend) {
	const tasks = 20
	id := func(i int) string { return fmt.Sprintf("cas%02d", i) }
	runRace(t, b, race{
		setup: func(e *env) {
			e.write(func(tx store.Tx) error {
				for i := range tasks {
					if err := enqueue(tx, store.Task{ID: id(i)}, at(0)); err != nil {
						return err
					}
				}
				return nil
			})
		},
		work: func(s store.Store, racer int) error {
			for i := range tasks {
				err := s.Write(ctx, func(tx store.Tx) error {
					ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id(i), From: "todo", To: "doing", At: at(1)})
					if err != nil || !ok {
						return err
					}
					return tx.EventAdd(ctx, store.Event{At: at(1), Kind: "won", TaskID: id(i), Data: fmt.Sprintf(`{"racer":%d}`, racer)})
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
		check: func(e *env, _ []int) {
			for i := range tasks {
				if st := e.task(id(i)).State; st != "doing" {
					e.t.Errorf("%s is %s, want doing", id(i), st)
				}
				var wins []string
				for _, ev := range e.taskEvents(id(i)) {
					if ev.Kind == "won" {
						wins = append(wins, ev.Data)
					}
				}
				if len(wins) != 1 {
					e.t.Errorf("%s won %d times, want once: %v", id(i), len(wins), wins)
				}
			}
		},
	})
}

// laneOf lists the live tasks of key's lane (todo, blocked, doing), in
// seq order.
func laneOf(r store.Reader, key string) ([]*store.Task, error) {
	var out []*store.Task
	err := r.TaskList(ctx, store.TaskFilter{Key: key, States: []string{"todo", "blocked", "doing"}},
		func(t *store.Task) error { out = append(out, t); return nil })
	slices.SortFunc(out, func(a, b *store.Task) int { return int(a.Seq - b.Seq) })
	return out, err
}

// laneHeads describes key's lane when it does not have exactly one head,
// its first task in seq order ("" when it does, or is empty).
func laneHeads(r store.Reader, key string) (string, error) {
	lane, err := laneOf(r, key)
	if err != nil || len(lane) == 0 {
		return "", err
	}
	var heads []string
	for _, t := range lane {
		if t.LaneHead {
			heads = append(heads, t.ID)
		}
	}
	if len(heads) == 1 && heads[0] == lane[0].ID {
		return "", nil
	}
	var desc []string
	for _, t := range lane {
		desc = append(desc, fmt.Sprintf("%s (seq %d, %s, head %v)", t.ID, t.Seq, t.State, t.LaneHead))
	}
	return fmt.Sprintf("heads %v of lane %s: %s", heads, key, strings.Join(desc, ", ")), nil
}

// testTaskLaneHeads: tasks entering a key's lane as the domain enters
// them (TaskLaneHeld decides LaneHead) leave only the first one its head;
// TaskLaneAdvance hands the lane to the next by seq, only once the head
// has left; keyless tasks are always heads.
func testTaskLaneHeads(t *testing.T, b Backend) {
	e := newEnv(t, b)
	heads := func(want ...string) {
		t.Helper()
		var got []string
		if err := e.s.TaskList(ctx, store.TaskFilter{}, func(tk *store.Task) error {
			if tk.LaneHead {
				got = append(got, tk.ID)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("heads %v, want %v", got, want)
		}
	}
	// z, y, x enter key k in that order (ids against seq order), with
	// keyless tasks between them; w waits in inbox, out of the lane.
	e.write(func(tx store.Tx) error {
		if err := tx.TaskCreateInbox(ctx, store.Task{ID: "w", Queue: "q", Key: "k", Spec: spec("w")}, at(0)); err != nil {
			return err
		}
		for _, tk := range []store.Task{{ID: "z", Key: "k"}, {ID: "n1"}, {ID: "y", Key: "k", State: "blocked", Hold: true, BlockedReason: "hold"},
			{ID: "n2"}, {ID: "x", Key: "k"}, {ID: "other", Key: "k2"}} {
			if err := enqueue(tx, tk, at(1)); err != nil {
				return err
			}
		}
		return nil
	})
	heads("n1", "n2", "other", "z")
	for _, c := range []struct {
		key, except string
		want        bool
	}{{"k", "", true}, {"k", "z", true}, {"k2", "other", false}, {"k3", "", false}, {"k2", "", true}} {
		if held, err := e.s.TaskLaneHeld(ctx, c.key, c.except); held != c.want || err != nil {
			t.Errorf("TaskLaneHeld(%s, except %q) = %v, %v; want %v", c.key, c.except, held, err, c.want)
		}
	}
	// The head still holds the lane: an advance changes nothing.
	e.write(func(tx store.Tx) error { return tx.TaskLaneAdvance(ctx, "k") })
	heads("n1", "n2", "other", "z")
	// z starts (doing: still in the lane), then ends: y, the next by seq,
	// blocked, becomes the head.
	e.write(func(tx store.Tx) error {
		if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: "z", From: "todo", To: "doing", At: at(2)}); !ok || err != nil {
			return fmt.Errorf("start z: %v, %w", ok, err)
		}
		return tx.TaskLaneAdvance(ctx, "k")
	})
	heads("n1", "n2", "other", "z")
	e.write(func(tx store.Tx) error { return finish(tx, "z", "doing", "done", at(3)) })
	heads("n1", "n2", "other", "y")
	// The lane's tasks are listed, and x was never its head.
	if got := e.task("x"); got.LaneHead {
		t.Errorf("x heads its lane: %+v", got)
	}
	// w enters now: behind x. y is cancelled: x heads, w waits.
	e.write(func(tx store.Tx) error {
		held, err := tx.TaskLaneHeld(ctx, "k", "w")
		if err != nil {
			return err
		}
		seq, err := tx.TaskSeqNext(ctx)
		if err != nil {
			return err
		}
		if !held {
			return errors.New("lane k not held")
		}
		if ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: "w", From: "inbox", To: "todo", At: at(4),
			Set: store.SetSeq | store.SetLaneHead | store.SetTodoAt, Seq: seq, LaneHead: !held, TodoAt: at(4)}); !ok || err != nil {
			return fmt.Errorf("enqueue w: %v, %w", ok, err)
		}
		return tx.EventAdd(ctx, store.Event{At: at(4), Kind: "task.todo", TaskID: "w", From: "inbox", To: "todo"})
	})
	e.write(func(tx store.Tx) error { return finish(tx, "y", "blocked", "cancelled", at(5)) })
	heads("n1", "n2", "other", "x")
	e.write(func(tx store.Tx) error { return finish(tx, "x", "todo", "done", at(6)) })
	heads("n1", "n2", "other", "w")
	e.write(func(tx store.Tx) error { return finish(tx, "w", "todo", "done", at(7)) })
	heads("n1", "n2", "other")
	// An advance of an empty lane, or of a keyless task's, changes nothing.
	e.write(func(tx store.Tx) error { return tx.TaskLaneAdvance(ctx, "k") })
	heads("n1", "n2", "other")
	if held, err := e.s.TaskLaneHeld(ctx, "k", ""); held || err != nil {
		t.Errorf("TaskLaneHeld(k) after every task ended = %v, %v", held, err)
	}
}

// testTaskLaneRace: racers enter tasks of one key and end its heads, each
// in a transaction of its own, as the domain does: the lane has one head,
// its first task, after every transaction.
func testTaskLaneRace(t *testing.T, b Backend) {
	const rounds = 12
	runRace(t, b, race{
		work: func(s store.Store, racer int) error {
			for j := range rounds {
				err := s.Write(ctx, func(tx store.Tx) error {
					if err := enqueue(tx, store.Task{ID: fmt.Sprintf("r%d-%02d", racer, j), Key: "lane"}, at(j)); err != nil {
						return err
					}
					if j%3 == 2 {
						lane, err := laneOf(tx, "lane")
						if err != nil {
							return err
						}
						if err := finish(tx, lane[0].ID, "todo", "done", at(j)); err != nil {
							return err
						}
					}
					bad, err := laneHeads(tx, "lane")
					if err == nil && bad != "" {
						err = errors.New(bad)
					}
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
		check: func(e *env, racers []int) {
			lane, err := laneOf(e.s, "lane")
			if err != nil {
				e.t.Fatal(err)
			}
			if want := len(racers) * (rounds - rounds/3); len(lane) != want {
				e.t.Errorf("%d tasks in the lane, want %d", len(lane), want)
			}
			if bad, err := laneHeads(e.s, "lane"); bad != "" || err != nil {
				e.t.Errorf("%s %v", bad, err)
			}
		},
	})
}

// testTaskDependencies: dependencies are reported in the order given;
// TaskDependencyDone counts a done dependency off its waiting dependents
// and returns the blocked ones it leaves ready; TaskDependentsWaiting
// lists those not started.
func testTaskDependencies(t *testing.T, b Backend) {
	e := newEnv(t, b)
	// w waits on d2, d1, d3, d0 in that order: not the order of their ids.
	order := []string{"d2", "d1", "d3", "d0"}
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"d0", "d1", "d2", "d3", "a"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		if err := tx.TaskCreateInbox(ctx, store.Task{ID: "w", Queue: "q", Spec: spec("w"), DepsLeft: 4}, at(0)); err != nil {
			return err
		}
		return tx.TaskDepsAdd(ctx, "w", order)
	})
	deps, err := e.s.TaskDepsOf(ctx, "w")
	if !slices.Equal(sorted(deps), []string{"d0", "d1", "d2", "d3"}) || err != nil {
		t.Errorf("TaskDepsOf(w) = %v, %v", deps, err)
	}
	var ordered []string
	if err := e.s.TaskDependencies(ctx, []string{"w"}, func(task, dep string) {
		if task == "w" {
			ordered = append(ordered, dep)
		}
	}); err != nil || !slices.Equal(ordered, order) {
		t.Errorf("TaskDependencies(w) = %v, %v; want the order given", ordered, err)
	}
	dead := func(wantDep, wantState string) {
		t.Helper()
		if dep, state, err := e.s.TaskDeadDependency(ctx, "w"); dep != wantDep || state != wantState || err != nil {
			t.Errorf("TaskDeadDependency(w) = %q, %q, %v; want %q, %q", dep, state, err, wantDep, wantState)
		}
	}
	notDone := func(want int) {
		t.Helper()
		if n, err := e.s.TaskDepsNotDone(ctx, "w"); n != want || err != nil {
			t.Errorf("TaskDepsNotDone(w) = %d, %v; want %d", n, err, want)
		}
	}
	dead("", "")
	notDone(4)
	e.write(func(tx store.Tx) error { return finish(tx, "d3", "todo", "failed", at(1)) })
	dead("d3", "failed")
	e.write(func(tx store.Tx) error { return finish(tx, "d1", "todo", "cancelled", at(2)) })
	dead("d1", "cancelled")
	notDone(4)
	e.write(func(tx store.Tx) error { return finish(tx, "d0", "todo", "done", at(3)) })
	dead("d1", "cancelled")
	notDone(3)
	e.write(func(tx store.Tx) error { return finish(tx, "d2", "todo", "failed", at(3)) })
	dead("d2", "failed")

	// Dependents of a: x and z blocked, y in inbox, v todo, c cancelled,
	// u doing. x waits on b too.
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "b"}, at(0)); err != nil {
			return err
		}
		for _, tk := range []store.Task{
			{ID: "x", State: "blocked", DepsLeft: 2, BlockedReason: "dependency"},
			{ID: "z", State: "blocked", DepsLeft: 1, BlockedReason: "dependency"},
			{ID: "v", DepsLeft: 0},
			{ID: "c", State: "blocked", DepsLeft: 1},
			{ID: "u", State: "blocked", DepsLeft: 1},
		} {
			if err := enqueue(tx, tk, at(4)); err != nil {
				return err
			}
		}
		if err := tx.TaskCreateInbox(ctx, store.Task{ID: "y", Queue: "q", Spec: spec("y"), DepsLeft: 1}, at(4)); err != nil {
			return err
		}
		for _, id := range []string{"x", "z", "v", "c", "u", "y"} {
			if err := tx.TaskDepsAdd(ctx, id, []string{"a"}); err != nil {
				return err
			}
		}
		if err := tx.TaskDepsAdd(ctx, "x", []string{"b"}); err != nil {
			return err
		}
		if err := finish(tx, "c", "blocked", "cancelled", at(5)); err != nil {
			return err
		}
		ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: "u", From: "blocked", To: "doing", At: at(5)})
		if !ok {
			return fmt.Errorf("start u: %w", err)
		}
		return err
	})
	waiting, err := e.s.TaskDependentsWaiting(ctx, "a")
	if got := sorted(ids(waiting)); !slices.Equal(got, []string{"v", "x", "y", "z"}) || err != nil {
		t.Errorf("TaskDependentsWaiting(a) = %v, %v; want v x y z", got, err)
	}
	var ready []*store.Task
	e.write(func(tx store.Tx) error {
		if err := finish(tx, "a", "todo", "done", at(6)); err != nil {
			return err
		}
		var err error
		ready, err = tx.TaskDependencyDone(ctx, "a")
		return err
	})
	if got := ids(ready); !slices.Equal(got, []string{"z"}) {
		t.Errorf("TaskDependencyDone(a) returned %v, want [z]", got)
	} else if ready[0].DepsLeft != 0 || ready[0].State != "blocked" {
		t.Errorf("TaskDependencyDone(a) returned %+v", ready[0])
	}
	for id, want := range map[string]int{"x": 1, "y": 0, "z": 0, "v": 0, "c": 1, "u": 1} {
		if got := e.task(id).DepsLeft; got != want {
			t.Errorf("%s has %d dependencies left, want %d", id, got, want)
		}
	}
	// b ends done: x is ready; a task no one waits on readies none.
	e.write(func(tx store.Tx) error {
		if err := finish(tx, "b", "todo", "done", at(6)); err != nil {
			return err
		}
		ready, err := tx.TaskDependencyDone(ctx, "b")
		if len(ready) != 1 || ready[0].ID != "x" {
			return fmt.Errorf("TaskDependencyDone(b) = %v, want [x]", ids(ready))
		}
		if ready, err := tx.TaskDependencyDone(ctx, "nobody's"); len(ready) != 0 || err != nil {
			return fmt.Errorf("TaskDependencyDone(nobody's) = %v, %w", ids(ready), err)
		}
		return err
	})
	// TaskDependentsCancelled: by reason, in seq order.
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"x", "z"} {
			if err := finish(tx, id, "blocked", "cancelled", at(7)); err != nil {
				return err
			}
		}
		for id, r := range map[string]string{"x": "dependency a failed", "z": "other", "c": "dependency a cancelled"} {
			if _, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id, From: "cancelled", To: "cancelled", At: at(8),
				Set: store.SetReason, Reason: r}); err != nil {
				return err
			}
		}
		return nil
	})
	if got, err := e.s.TaskDependentsCancelled(ctx, "a", "dependency a failed", "dependency a cancelled"); !slices.Equal(got, []string{"x", "c"}) || err != nil {
		t.Errorf("TaskDependentsCancelled(a) = %v, %v; want [x c] (by seq)", got, err)
	}
}

// testTaskKeyHolder: TaskKeyHolder finds a live task of the key (inbox,
// todo, blocked, doing), never an ended one nor the one excepted.
func testTaskKeyHolder(t *testing.T, b Backend) {
	e := newEnv(t, b)
	holder := func(key, except string, want ...string) {
		t.Helper()
		h, err := e.s.TaskKeyHolder(ctx, key, except)
		switch {
		case err != nil:
			t.Fatal(err)
		case len(want) == 0 && h != nil:
			t.Errorf("TaskKeyHolder(%s, except %q) = %+v, want none", key, except, *h)
		case len(want) > 0 && (h == nil || *h != store.KeyHolder{ID: want[0], State: want[1]}):
			t.Errorf("TaskKeyHolder(%s, except %q) = %v, want %v", key, except, h, want)
		}
	}
	e.write(func(tx store.Tx) error {
		for i, end := range []string{"done", "failed", "cancelled"} {
			id := fmt.Sprintf("ended%d", i)
			if err := enqueue(tx, store.Task{ID: id, Key: "u", Unique: true}, at(0)); err != nil {
				return err
			}
			if err := finish(tx, id, "todo", end, at(1)); err != nil {
				return err
			}
		}
		return nil
	})
	holder("u", "")
	holder("none", "")
	for _, live := range []string{"inbox", "todo", "blocked", "doing"} {
		e.write(func(tx store.Tx) error {
			if live == "inbox" {
				return tx.TaskCreateInbox(ctx, store.Task{ID: live, Queue: "q", Key: "u", Unique: true, Spec: spec(live)}, at(2))
			}
			state := live
			if live == "doing" {
				state = "todo"
			}
			if err := enqueue(tx, store.Task{ID: live, Key: "u", State: state, Unique: true}, at(2)); err != nil {
				return err
			}
			if live == "doing" {
				_, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: live, From: "todo", To: "doing", At: at(2)})
				return err
			}
			return nil
		})
		holder("u", "", live, live)
		holder("u", live)
		e.write(func(tx store.Tx) error { return finish(tx, live, live, "cancelled", at(3)) })
		holder("u", "")
	}
}

// testTaskChangeSpecAndRetryReset: TaskChangeSpec and TaskRetryReset
// apply in the state given only, and write what they name.
func testTaskChangeSpecAndRetryReset(t *testing.T, b Backend) {
	e := newEnv(t, b)
	before := fullTask(e, "a")
	var ok bool
	e.write(func(tx store.Tx) error {
		var err error
		ok, err = tx.TaskChangeSpec(ctx, store.TaskSpecChange{ID: "a", From: "blocked", Spec: "{}", Queue: "q2", Priority: 0, At: at(20)})
		return err
	})
	if ok || e.task("a") != before {
		t.Errorf("TaskChangeSpec from another state applied: %v, %+v", ok, e.task("a"))
	}
	e.write(func(tx store.Tx) error {
		var err error
		ok, err = tx.TaskChangeSpec(ctx, store.TaskSpecChange{ID: "a", From: "todo", Spec: `{"x":1}`, Queue: "q2", Priority: 3, At: at(20)})
		return err
	})
	want := before
	want.Spec, want.Queue, want.Priority, want.UpdatedAt = `{"x":1}`, "q2", 3, at(20)
	if got := e.task("a"); !ok || got != want {
		t.Errorf("TaskChangeSpec: %v\ngot  %+v\nwant %+v", ok, got, want)
	}
	e.write(func(tx store.Tx) error { return tx.TaskRetryReset(ctx, "a", "failed", 7) })
	if got := e.task("a"); got != want {
		t.Errorf("TaskRetryReset from another state changed the task: %+v", got)
	}
	e.write(func(tx store.Tx) error { return tx.TaskRetryReset(ctx, "a", "todo", 7) })
	want.DepsLeft, want.NotBefore, want.NotBeforeWhy, want.FailsOther, want.FailsTransient, want.FailsTimeout = 7, "", "", 0, 0, 0
	if got := e.task("a"); got != want {
		t.Errorf("TaskRetryReset:\ngot  %+v\nwant %+v", got, want)
	}
}

// testTaskIDsWithPrefix: ids longer than the prefix, bytewise, limited.
func testTaskIDsWithPrefix(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"ab", "abc", "ab.1", "ab-2", "ab_3", "ab:4", "aa", "b", "AB5"} {
			if err := tx.TaskCreateInbox(ctx, store.Task{ID: id, Queue: "q", Spec: "{}"}, at(0)); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"ab", 10, []string{"ab-2", "ab.1", "ab:4", "ab_3", "abc"}},
		{"ab", 2, []string{"ab-2", "ab.1"}},
		{"abc", 10, []string{}},
		{"z", 10, []string{}},
		{"", 3, []string{"AB5", "aa", "ab"}},
	} {
		got, err := e.s.TaskIDsWithPrefix(ctx, c.prefix, c.limit)
		if err != nil || !slices.Equal(append([]string{}, got...), c.want) {
			t.Errorf("TaskIDsWithPrefix(%q, %d) = %v, %v; want %v", c.prefix, c.limit, got, err, c.want)
		}
	}
}
