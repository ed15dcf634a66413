package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// testTaskList: a listing selects the tasks every condition of its filter
// holds for, the newest stored first, at most Limit; TaskListIDs lists
// the same; TaskCount counts them all; fn's error stops it.
func testTaskList(t *testing.T, b Backend) {
	e := newEnv(t, b)
	type row struct{ id, state, queue, key string }
	var rows []row // in the order stored
	e.write(func(tx store.Tx) error {
		for i := range 30 {
			r := row{id: fmt.Sprintf("t%02d", 29-i), queue: []string{"q1", "q2"}[i%2], key: []string{"", "k1", "k2"}[i%3]}
			var err error
			switch i % 5 {
			case 0:
				r.state = "inbox"
				if err = tx.QueueEnsure(ctx, r.queue, at(i)); err == nil {
					err = tx.TaskCreateInbox(ctx, store.Task{ID: r.id, Queue: r.queue, Key: r.key, Spec: spec(r.id)}, at(i))
				}
			case 1, 2:
				r.state = "todo"
				err = enqueue(tx, store.Task{ID: r.id, Queue: r.queue, Key: r.key}, at(i))
			case 3:
				r.state = "blocked"
				err = enqueue(tx, store.Task{ID: r.id, Queue: r.queue, Key: r.key, State: "blocked", Hold: true}, at(i))
			case 4:
				r.state = "done"
				if err = enqueue(tx, store.Task{ID: r.id, Queue: r.queue, Key: r.key}, at(i)); err == nil {
					err = finish(tx, r.id, "todo", "done", at(i))
				}
			}
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return nil
	})
	for _, f := range []store.TaskFilter{
		{},
		{Limit: 4},
		{States: []string{"todo"}},
		{States: []string{"todo"}, Limit: 3},
		{States: []string{"todo", "blocked"}, Limit: 5},
		{States: []string{"todo", "todo"}, Limit: 5},
		{States: []string{"done", "inbox"}, Queue: "q1"},
		{States: []string{"done", "inbox"}, Queue: "q1", Limit: 2},
		{States: []string{"doing"}, Limit: 2},
		{Queue: "q2"},
		{Queue: "q2", Limit: 1},
		{Queue: "none"},
		{Key: "k1"},
		{Key: "k1", States: []string{"todo"}, Limit: 2},
		{Key: "k2", Queue: "q1"},
	} {
		var want []string
		n := 0
		for i := len(rows) - 1; i >= 0; i-- {
			r := rows[i]
			if (len(f.States) > 0 && !slices.Contains(f.States, r.state)) || (f.Queue != "" && r.queue != f.Queue) || (f.Key != "" && r.key != f.Key) {
				continue
			}
			n++
			if f.Limit == 0 || len(want) < f.Limit {
				want = append(want, r.id)
			}
		}
		var got, gotIDs []string
		if err := e.s.TaskList(ctx, f, func(tk *store.Task) error {
			got = append(got, tk.ID)
			if want := e.task(tk.ID); *tk != want {
				return fmt.Errorf("listed %+v, stored %+v", *tk, want)
			}
			return nil
		}); err != nil {
			t.Fatalf("TaskList(%+v): %v", f, err)
		}
		if err := e.s.TaskListIDs(ctx, f, func(id string) error { gotIDs = append(gotIDs, id); return nil }); err != nil {
			t.Fatalf("TaskListIDs(%+v): %v", f, err)
		}
		if !slices.Equal(got, want) || !slices.Equal(gotIDs, want) {
			t.Errorf("filter %+v:\nTaskList    %v\nTaskListIDs %v\nwant        %v", f, got, gotIDs, want)
		}
		if c, err := e.s.TaskCount(ctx, f); c != n || err != nil {
			t.Errorf("TaskCount(%+v) = %d, %v; want %d", f, c, err, n)
		}
	}
	// fn's error stops the listing and is returned.
	errStop := errors.New("stop")
	for _, f := range []store.TaskFilter{{}, {States: []string{"todo"}, Limit: 5}} {
		calls := 0
		err := e.s.TaskList(ctx, f, func(*store.Task) error { calls++; return errStop })
		if !errors.Is(err, errStop) || calls != 1 {
			t.Errorf("TaskList(%+v) went on after fn's error: %d calls, %v", f, calls, err)
		}
		calls = 0
		err = e.s.TaskListIDs(ctx, f, func(string) error { calls++; return errStop })
		if !errors.Is(err, errStop) || calls != 1 {
			t.Errorf("TaskListIDs(%+v) went on after fn's error: %d calls, %v", f, calls, err)
		}
	}
	// The state counts and the states of some ids.
	counts := map[string]int{}
	if err := e.s.TaskStateCounts(ctx, func(state string, n int) { counts[state] += n }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"inbox": 6, "todo": 12, "blocked": 6, "done": 6}; !maps.Equal(counts, want) {
		t.Errorf("TaskStateCounts = %v, want %v", counts, want)
	}
	states := map[string]string{}
	if err := e.s.TaskStates(ctx, []string{"t29", "t25", "nope"}, func(id, state, reason string) { states[id] = state + "/" + reason }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"t29": "inbox/", "t25": "done/"}; !maps.Equal(states, want) {
		t.Errorf("TaskStates = %v, want %v", states, want)
	}
}

// testTaskBlockedReads: the reads of blocked and todo tasks the
// maintenance pass and the health figures use.
func testTaskBlockedReads(t *testing.T, b Backend) {
	e := newEnv(t, b)
	check := func(now string, wantDue, wantReady []string, wantNext string) {
		t.Helper()
		due, err := e.s.TaskDue(ctx, now)
		if got := sorted(ids(due)); err != nil || !slices.Equal(got, wantDue) {
			t.Errorf("TaskDue(%s) = %v, %v; want %v", now, got, err, wantDue)
		}
		ready, err := e.s.TaskBlockedReady(ctx, now)
		if got := sorted(ids(ready)); err != nil || !slices.Equal(got, wantReady) {
			t.Errorf("TaskBlockedReady(%s) = %v, %v; want %v", now, got, err, wantReady)
		}
		if next, err := e.s.TaskNextDue(ctx); next != wantNext || err != nil {
			t.Errorf("TaskNextDue = %q, %v; want %q", next, err, wantNext)
		}
	}
	check(at(0), []string{}, []string{}, "")
	if ok, err := e.s.TaskRunnableExists(ctx); ok || err != nil {
		t.Errorf("TaskRunnableExists on an empty store = %v, %v", ok, err)
	}
	e.write(func(tx store.Tx) error {
		for _, tk := range []store.Task{
			{ID: "soon", State: "blocked", NotBefore: at(10), NotBeforeWhy: "scheduled", BlockedReason: "scheduled"},
			{ID: "later", State: "blocked", NotBefore: at(20), NotBeforeWhy: "retry", BlockedReason: "retry"},
			{ID: "held", State: "blocked", NotBefore: at(5), Hold: true, BlockedReason: "hold"},
			{ID: "deps", State: "blocked", NotBefore: at(5), DepsLeft: 1, BlockedReason: "dependency"},
			{ID: "free", State: "blocked"},
			{ID: "lane", Key: "k", State: "blocked", Hold: true},
			{ID: "behind", Key: "k"},
		} {
			if err := enqueue(tx, tk, at(0)); err != nil {
				return err
			}
		}
		return nil
	})
	check(at(0), []string{}, []string{"free"}, at(5))
	check(at(10), []string{"soon"}, []string{"free", "soon"}, at(5))
	check(at(30), []string{"later", "soon"}, []string{"free", "later", "soon"}, at(5))
	if n, err := e.s.TaskRetryBlockedCount(ctx); n != 1 || err != nil {
		t.Errorf("TaskRetryBlockedCount = %d, %v; want 1", n, err)
	}
	// behind is todo but not its lane's head: nothing is runnable.
	if ok, err := e.s.TaskRunnableExists(ctx); ok || err != nil {
		t.Errorf("TaskRunnableExists with no todo head = %v, %v", ok, err)
	}
	if id, q, since, err := e.s.TaskOldestTodo(ctx); id != "behind" || q != "q" || since != at(0) || err != nil {
		t.Errorf("TaskOldestTodo = %s, %s, %s, %v", id, q, since, err)
	}
	e.write(func(tx store.Tx) error { return enqueue(tx, store.Task{ID: "keyless"}, at(1)) })
	if ok, err := e.s.TaskRunnableExists(ctx); !ok || err != nil {
		t.Errorf("TaskRunnableExists with a keyless todo task = %v, %v", ok, err)
	}
	// The warnings of long waits.
	if got, err := e.s.TaskWaitingUnwarned(ctx, "q", at(1), 10); !slices.Equal(got, []string{"behind"}) || err != nil {
		t.Errorf("TaskWaitingUnwarned(before %s) = %v, %v; want [behind]", at(1), got, err)
	}
	e.write(func(tx store.Tx) error {
		if ok, err := tx.TaskWarnedSet(ctx, "behind"); !ok || err != nil {
			return fmt.Errorf("TaskWarnedSet(behind) = %v, %w", ok, err)
		}
		if ok, err := tx.TaskWarnedSet(ctx, "behind"); ok || err != nil {
			return fmt.Errorf("TaskWarnedSet(behind) again = %v, %w", ok, err)
		}
		if ok, err := tx.TaskWarnedSet(ctx, "free"); ok || err != nil {
			return fmt.Errorf("TaskWarnedSet(free), blocked = %v, %w", ok, err)
		}
		return nil
	})
	if got, err := e.s.TaskWaitingUnwarned(ctx, "q", at(2), 10); !slices.Equal(got, []string{"keyless"}) || err != nil {
		t.Errorf("TaskWaitingUnwarned(before %s) = %v, %v; want [keyless]", at(2), got, err)
	}
	if n, err := e.s.TaskWaitWarnedCount(ctx); n != 1 || err != nil {
		t.Errorf("TaskWaitWarnedCount = %d, %v; want 1", n, err)
	}
}

// testSnapshot: the reads of a Snapshot see one state of the store,
// whatever commits meanwhile; in a transaction they read it.
func testSnapshot(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error { return enqueue(tx, store.Task{ID: "a"}, at(0)) })
	read := func(r store.Reader) (string, error) {
		n, err := r.TaskCount(ctx, store.TaskFilter{})
		if err != nil {
			return "", err
		}
		last, err := r.EventLastSeq(ctx)
		return fmt.Sprintf("%d tasks, last event %d", n, last), err
	}
	err := e.s.Snapshot(ctx, func(r store.Reader) error {
		before, err := read(r)
		if err != nil {
			return err
		}
		if err := e.s.Write(ctx, func(tx store.Tx) error { return enqueue(tx, store.Task{ID: "b"}, at(1)) }); err != nil {
			return err
		}
		after, err := read(r)
		if err != nil {
			return err
		}
		if before != after || !strings.HasPrefix(before, "1 tasks,") {
			return fmt.Errorf("in the snapshot: %s, then %s after a commit", before, after)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.s.TaskCount(ctx, store.TaskFilter{}); n != 2 || err != nil {
		t.Errorf("after the snapshot: %d tasks, %v", n, err)
	}
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "c"}, at(2)); err != nil {
			return err
		}
		return tx.Snapshot(ctx, func(r store.Reader) error {
			if ok, err := r.TaskExists(ctx, "c"); !ok || err != nil {
				return fmt.Errorf("a snapshot in a transaction does not read it: %v, %w", ok, err)
			}
			return nil
		})
	})
}

// defaultQueue is the settings of a queue no one has set.
func defaultQueue(name string) store.Queue {
	return store.Queue{Name: name, BackoffMS: 30000, TransientRetries: 3, TimeoutRetries: 1, StartTimeoutMS: 600000, WarnAfterMS: 600000}
}

// testQueueSettings: a queue exists once ensured, with the default
// settings, which QueueUpdate changes one by one, reporting only real
// changes; QueueEnsure keeps them; the lists are by name.
func testQueueSettings(t *testing.T, b Backend) {
	e := newEnv(t, b)
	if _, err := e.s.QueueGet(ctx, "q"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("QueueGet of no queue: %v, want ErrNotFound", err)
	}
	if ok, err := e.s.QueueExists(ctx, "q"); ok || err != nil {
		t.Errorf("QueueExists of no queue = %v, %v", ok, err)
	}
	if qs, err := e.s.QueueList(ctx); len(qs) != 0 || err != nil {
		t.Errorf("QueueList of none = %v, %v", qs, err)
	}
	e.write(func(tx store.Tx) error {
		for _, name := range []string{"q", "b", "q", "a"} {
			if err := tx.QueueEnsure(ctx, name, at(0)); err != nil {
				return err
			}
		}
		return nil
	})
	get := func(name string) store.Queue {
		t.Helper()
		q, err := e.s.QueueGet(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return *q
	}
	if got := get("q"); got != defaultQueue("q") {
		t.Errorf("a new queue: %+v, want the defaults %+v", got, defaultQueue("q"))
	}
	update := func(u store.QueueUpdate) bool {
		t.Helper()
		var ok bool
		e.write(func(tx store.Tx) error {
			var err error
			ok, err = tx.QueueUpdate(ctx, u)
			return err
		})
		return ok
	}
	want := defaultQueue("q")
	for _, c := range []struct {
		set   store.QueueFields
		apply func(q *store.Queue)
	}{
		{store.SetQueueConcurrency, func(q *store.Queue) { q.Concurrency = 4 }},
		{store.SetQueueRetries, func(q *store.Queue) { q.Retries = 5 }},
		{store.SetQueueBackoff, func(q *store.Queue) { q.BackoffMS = 1234 }},
		{store.SetQueueTransientRetries, func(q *store.Queue) { q.TransientRetries = 0 }},
		{store.SetQueueTimeoutRetries, func(q *store.Queue) { q.TimeoutRetries = 7 }},
		{store.SetQueueTimeout, func(q *store.Queue) { q.TimeoutMS = 60000 }},
		{store.SetQueueStartTimeout, func(q *store.Queue) { q.StartTimeoutMS = 1 }},
		{store.SetQueueWarnAfter, func(q *store.Queue) { q.WarnAfterMS = 0 }},
		{store.SetQueuePaused, func(q *store.Queue) { q.Paused = true }},
		{store.SetQueueTimeoutCountsAsks, func(q *store.Queue) { q.TimeoutCountsAsks = true }},
	} {
		// Every value different from its default, but only the bit's
		// written.
		u := store.QueueUpdate{Name: "q", At: at(1), Set: c.set, Concurrency: 4, Retries: 5, BackoffMS: 1234, TransientRetries: 0,
			TimeoutRetries: 7, TimeoutMS: 60000, StartTimeoutMS: 1, WarnAfterMS: 0, Paused: true, TimeoutCountsAsks: true}
		if !update(u) {
			t.Errorf("QueueUpdate(Set %#x) reported no change", uint(c.set))
		}
		c.apply(&want)
		if got := get("q"); got != want {
			t.Errorf("QueueUpdate(Set %#x):\ngot  %+v\nwant %+v", uint(c.set), got, want)
		}
		if update(u) {
			t.Errorf("QueueUpdate(Set %#x) again reported a change", uint(c.set))
		}
	}
	if update(store.QueueUpdate{Name: "q", At: at(2)}) {
		t.Error("QueueUpdate of no setting reported a change")
	}
	if update(store.QueueUpdate{Name: "none", At: at(2), Set: store.SetQueuePaused, Paused: true}) {
		t.Error("QueueUpdate of no queue reported a change")
	}
	if ok, err := e.s.QueueExists(ctx, "none"); ok || err != nil {
		t.Errorf("QueueUpdate made a queue: %v, %v", ok, err)
	}
	e.write(func(tx store.Tx) error { return tx.QueueEnsure(ctx, "q", at(3)) })
	if got := get("q"); got != want {
		t.Errorf("QueueEnsure of a set queue changed it: %+v", got)
	}
	qs, err := e.s.QueueList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
		if q.Name == "q" && *q != want {
			t.Errorf("QueueList has %+v, want %+v", *q, want)
		}
	}
	if !slices.Equal(names, []string{"a", "b", "q"}) {
		t.Errorf("QueueList = %v, want [a b q]", names)
	}
	// The backlog counts todo tasks.
	e.write(func(tx store.Tx) error {
		for _, tk := range []store.Task{{ID: "1", Queue: "b"}, {ID: "2", Queue: "b"}, {ID: "3", Queue: "b", State: "blocked"}, {ID: "4", Queue: "a"}} {
			if err := enqueue(tx, tk, at(4)); err != nil {
				return err
			}
		}
		return nil
	})
	counts, err := e.s.QueueListWithCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range counts {
		got = append(got, fmt.Sprintf("%s %d %d", c.Name, c.Backlog, c.Running))
		if c.Name == "q" && c.Queue != want {
			t.Errorf("QueueListWithCounts has %+v, want %+v", c.Queue, want)
		}
	}
	if want := []string{"a 1 0", "b 2 0", "q 0 0"}; !slices.Equal(got, want) {
		t.Errorf("QueueListWithCounts = %v, want %v", got, want)
	}
	timeouts := map[string]int64{}
	if err := e.s.QueueTimeouts(ctx, func(q string, ms int64) { timeouts[q] = ms }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 0, "b": 0, "q": 60000}; !maps.Equal(timeouts, want) {
		t.Errorf("QueueTimeouts = %v, want %v", timeouts, want)
	}
}

// testSystemState: a value is set, replaced, read and deleted.
func testSystemState(t *testing.T, b Backend) {
	e := newEnv(t, b)
	get := func(key, want string, wantOK bool) {
		t.Helper()
		if v, ok, err := e.s.SystemStateGet(ctx, key); v != want || ok != wantOK || err != nil {
			t.Errorf("SystemStateGet(%s) = %q, %v, %v; want %q, %v", key, v, ok, err, want, wantOK)
		}
	}
	get("k", "", false)
	e.write(func(tx store.Tx) error { return tx.SystemStateSet(ctx, "k", "one", at(0)) })
	get("k", "one", true)
	e.write(func(tx store.Tx) error {
		if err := tx.SystemStateSet(ctx, "k", "two", at(1)); err != nil {
			return err
		}
		return tx.SystemStateSet(ctx, "empty", "", at(1))
	})
	get("k", "two", true)
	get("empty", "", true)
	e.write(func(tx store.Tx) error {
		if err := tx.SystemStateDelete(ctx, "k"); err != nil {
			return err
		}
		return tx.SystemStateDelete(ctx, "never set")
	})
	get("k", "", false)
	get("empty", "", true)
}

// testWorkers: workers' rows are saved and refreshed (their start kept),
// listed while their lease holds (judged on the boot clock when both
// sides have one of the same boot), swept and deleted.
func testWorkers(t *testing.T, b Backend) {
	e := newEnv(t, b)
	save := func(ws ...store.WorkerSeen) {
		t.Helper()
		e.write(func(tx store.Tx) error {
			for _, w := range ws {
				if err := tx.WorkerSave(ctx, w); err != nil {
					return err
				}
			}
			return nil
		})
	}
	wall := store.WorkerSeen{ID: "w-wall", Host: "h1", PID: 10, Queues: `[]`, Concurrency: 2, LeaseMS: 60000, At: at(0), LeaseExpires: at(60)}
	boot := store.WorkerSeen{ID: "w-boot", Host: "h2", PID: 20, Queues: `["a","b"]`, Concurrency: 1, LeaseMS: 60000, At: at(0),
		LeaseExpires: at(60), BootID: "b1", LeaseUntilNS: 5000}
	late := store.WorkerSeen{ID: "a-late", Host: "h1", PID: 30, Queues: `[]`, Concurrency: 1, LeaseMS: 60000, At: at(1), LeaseExpires: at(61)}
	save(wall, boot, late)
	live := func(lt store.LeaseClock, want ...string) {
		t.Helper()
		ws, err := e.s.WorkerListLive(ctx, lt)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, w := range ws {
			got = append(got, w.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("WorkerListLive(%+v) = %v, want %v", lt, got, want)
		}
		if anyLive, err := e.s.WorkerAnyLive(ctx, lt); anyLive != (len(want) > 0) || err != nil {
			t.Errorf("WorkerAnyLive(%+v) = %v, %v", lt, anyLive, err)
		}
	}
	// By start, then id.
	live(store.LeaseClock{Wall: at(10)}, "w-boot", "w-wall", "a-late")
	// No boot clock: every lease on the wall clock.
	live(store.LeaseClock{Wall: at(60)}, "a-late")
	live(store.LeaseClock{Wall: at(61)})
	// The same boot: w-boot's on the boot clock, the others' on the wall.
	live(store.LeaseClock{Wall: at(100), BootID: "b1", BootNS: 4999}, "w-boot")
	live(store.LeaseClock{Wall: at(10), BootID: "b1", BootNS: 5000}, "w-wall", "a-late")
	// Another boot: w-boot's lease has passed.
	live(store.LeaseClock{Wall: at(10), BootID: "b2", BootNS: 0}, "w-wall", "a-late")

	ws, err := e.s.WorkerListLive(ctx, store.LeaseClock{Wall: at(10)})
	if err != nil || len(ws) != 3 {
		t.Fatal(ws, err)
	}
	if want := (store.Worker{ID: "w-boot", Host: "h2", PID: 20, Queues: `["a","b"]`, Concurrency: 1, StartedAt: at(0), LastSeen: at(0)}); ws[0] != want {
		t.Errorf("listed %+v, want %+v", ws[0], want)
	}
	// A refresh keeps the start; it may drop the boot clock.
	boot.At, boot.Host, boot.PID, boot.Queues, boot.Concurrency, boot.LeaseExpires, boot.BootID = at(30), "h3", 21, `["c"]`, 5, at(90), ""
	save(boot)
	ws, err = e.s.WorkerListLive(ctx, store.LeaseClock{Wall: at(70), BootID: "b1", BootNS: 1 << 40})
	if want := []store.Worker{{ID: "w-boot", Host: "h3", PID: 21, Queues: `["c"]`, Concurrency: 5, StartedAt: at(0), LastSeen: at(30)}}; err != nil || !slices.Equal(ws, want) {
		t.Errorf("after a refresh: %+v, %v; want %+v", ws, err, want)
	}
	// Sweep by the wall clock: leases that passed before the time given.
	var swept int
	e.write(func(tx store.Tx) error {
		var err error
		swept, err = tx.WorkerSweep(ctx, at(61))
		return err
	})
	if swept != 1 {
		t.Errorf("WorkerSweep(%s) = %d, want 1", at(61), swept)
	}
	live(store.LeaseClock{Wall: at(0)}, "w-boot", "a-late")
	e.write(func(tx store.Tx) error {
		if err := tx.WorkerDelete(ctx, "a-late"); err != nil {
			return err
		}
		return tx.WorkerDelete(ctx, "none")
	})
	live(store.LeaseClock{Wall: at(0)}, "w-boot")
}
