package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
)

func viewsAt(i int) string {
	return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second).Format("2006-01-02T15:04:05.000Z")
}

// TestViewsPaging: the listings read by pages return what one read would
// (more tasks than a page, limits across pages, fn's error), the clear
// scan walks by position, EventList pages past its page size, and the
// run views and counts read what the runs hold.
func TestViewsPaging(t *testing.T) {
	ctx := context.Background()
	d, err := postgres.Open(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	s := d.Store()
	const n = 1234
	var stored []string // in the order stored
	err = s.Write(ctx, func(tx store.Tx) error {
		for i := range n {
			id := fmt.Sprintf("t%05d", (i*7919)%n) // not in id order
			q := []string{"a", "b", "c"}[i%3]
			if err := tx.QueueEnsure(ctx, q, viewsAt(0)); err != nil {
				return err
			}
			tk := store.Task{ID: id, Queue: q, State: "todo", TodoAt: viewsAt(i), LaneHead: true, Spec: `{}`}
			if i%4 == 0 {
				tk.State, tk.TodoAt = "blocked", ""
			}
			if err := tx.TaskCreateEnqueued(ctx, tk, viewsAt(i)); err != nil {
				return err
			}
			stored = append(stored, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	newest := slices.Clone(stored)
	slices.Reverse(newest)
	list := func(f store.TaskFilter) []string {
		t.Helper()
		var ids, ids2 []string
		if err := s.TaskListIDs(ctx, f, func(id string) error { ids = append(ids, id); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.TaskList(ctx, f, func(tk *store.Task) error { ids2 = append(ids2, tk.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, ids2) {
			t.Errorf("%+v: TaskList and TaskListIDs differ", f)
		}
		return ids
	}
	if got := list(store.TaskFilter{}); !slices.Equal(got, newest) {
		t.Errorf("all: %d tasks, want %d in order", len(got), len(newest))
	}
	if got := list(store.TaskFilter{Limit: 777}); !slices.Equal(got, newest[:777]) {
		t.Errorf("limit 777: %d tasks", len(got))
	}
	if got := list(store.TaskFilter{Limit: 500}); !slices.Equal(got, newest[:500]) {
		t.Errorf("limit 500: %d tasks", len(got))
	}
	var wantB []string
	for i, id := range stored {
		if i%3 == 1 && i%4 != 0 {
			wantB = append(wantB, id)
		}
	}
	slices.Reverse(wantB)
	if got := list(store.TaskFilter{Queue: "b", States: []string{"todo"}}); !slices.Equal(got, wantB) {
		t.Errorf("queue b todo: %d tasks, want %d", len(got), len(wantB))
	}
	if got := list(store.TaskFilter{Queue: "b", States: []string{"todo"}, Limit: 300}); !slices.Equal(got, wantB[:300]) {
		t.Errorf("queue b todo, limit 300: %d tasks", len(got))
	}
	if got := list(store.TaskFilter{States: []string{"todo", "blocked"}, Limit: 20000}); !slices.Equal(got, newest) {
		t.Errorf("by state, above the by-state bound: %d tasks", len(got))
	}
	calls := 0
	if err := s.TaskListIDs(ctx, store.TaskFilter{}, func(string) error { calls++; return fmt.Errorf("stop") }); err == nil || calls != 1 {
		t.Errorf("fn's error: %d calls, %v", calls, err)
	}

	// The clear scan, window by window.
	last, err := s.TaskLastPos(ctx)
	if err != nil || last < n {
		t.Fatalf("TaskLastPos = %d, %v", last, err)
	}
	var cleared []string
	for after := int64(0); ; {
		ids, l, err := s.TaskClearable(ctx, store.TaskClearScan{Queue: "a", After: after, Upto: last, CreatedBy: viewsAt(1000), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			if l != 0 {
				t.Errorf("no ids, last %d", l)
			}
			break
		}
		cleared = append(cleared, ids...)
		after = l
	}
	var wantA []string
	for i, id := range stored {
		if i%3 == 0 && i <= 1000 {
			wantA = append(wantA, id)
		}
	}
	if !slices.Equal(cleared, wantA) {
		t.Errorf("TaskClearable: %d ids, want %d in order", len(cleared), len(wantA))
	}

	// Events, past a page.
	base, err := s.EventLastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Write(ctx, func(tx store.Tx) error {
		for i := range 2500 {
			if err := tx.EventAdd(ctx, store.Event{At: viewsAt(i), Kind: "x", TaskID: "e"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	count := func(since int64, limit int) (int, int64) {
		k, prev := 0, since
		if err := s.EventList(ctx, since, limit, func(e *store.EventRecord) {
			if e.Seq <= prev {
				t.Errorf("seq %d after %d", e.Seq, prev)
			}
			prev = e.Seq
			k++
		}); err != nil {
			t.Fatal(err)
		}
		return k, prev
	}
	if k, _ := count(base, 2100); k != 2100 {
		t.Errorf("EventList(0, 2100): %d events", k)
	}
	if k, _ := count(base+10, 5000); k != 2490 {
		t.Errorf("EventList(10, 5000): %d events", k)
	}
	if k, _ := count(base, 0); k != 0 {
		t.Errorf("EventList(0, 0): %d events", k)
	}
	var ofTask int
	if err := s.EventListOfTask(ctx, "e", func(*store.EventRecord) { ofTask++ }); err != nil || ofTask != 2500 {
		t.Errorf("EventListOfTask: %d, %v", ofTask, err)
	}

	// Runs: the views, the ended figures, the live counts by queue and
	// worker.
	_, err = d.Pool.Exec(ctx, `INSERT INTO runs (id, task_id, attempt, state, queue, worker, exit_code, created_at, started_at, ended_at) VALUES
		('r1', $1, 1, 'failed', 'a', 'w1', 3, $2, $2, $3),
		('r2', $1, 2, 'running', 'a', 'w1', NULL, $3, $3, NULL),
		('r3', $4, 1, 'cancelling', 'b', 'w2', NULL, $3, $3, NULL),
		('r4', $4, 2, 'succeeded', 'b', 'w2', 0, $3, $3, $5)`,
		stored[0], viewsAt(0), viewsAt(10), stored[1], viewsAt(40))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := s.RunViewList(ctx, stored[0])
	if err != nil || len(rv) != 2 || rv[0].ID != "r1" || rv[0].ExitCode == nil || *rv[0].ExitCode != 3 || rv[1].ExitCode != nil ||
		rv[0].EndedAt != viewsAt(10) || rv[1].EndedAt != "" || rv[0].Worker != "w1" {
		t.Errorf("RunViewList = %+v, %v", rv, err)
	}
	if v, err := s.RunViewGet(ctx, "r4"); err != nil || v.State != "succeeded" || *v.ExitCode != 0 {
		t.Errorf("RunViewGet = %+v, %v", v, err)
	}
	if avg, ok, err := s.RunEndedAvgSeconds(ctx, viewsAt(0)); !ok || err != nil || avg != 20 {
		t.Errorf("RunEndedAvgSeconds = %v, %v, %v; want 20", avg, ok, err)
	}
	if _, ok, err := s.RunEndedAvgSeconds(ctx, viewsAt(41)); ok || err != nil {
		t.Errorf("RunEndedAvgSeconds of none = %v, %v", ok, err)
	}
	ended := map[string]int{}
	if err := s.RunEndedCounts(ctx, viewsAt(5), func(st string, k int) { ended[st] = k }); err != nil || len(ended) != 2 ||
		ended["failed"] != 1 || ended["succeeded"] != 1 {
		t.Errorf("RunEndedCounts = %v, %v", ended, err)
	}
	if ids, err := s.RunCancellingIDs(ctx, "w2"); err != nil || !slices.Equal(ids, []string{"r3"}) {
		t.Errorf("RunCancellingIDs = %v, %v", ids, err)
	}
	byWorker := map[string]int{}
	if err := s.WorkerRunCounts(ctx, func(w string, k int) { byWorker[w] = k }); err != nil || byWorker["w1"] != 1 || byWorker["w2"] != 1 {
		t.Errorf("WorkerRunCounts = %v, %v", byWorker, err)
	}
	qs, err := s.QueueListWithCounts(ctx)
	if err != nil || len(qs) != 3 || qs[0].Name != "a" || qs[0].Running != 1 || qs[1].Running != 1 || qs[2].Running != 0 {
		t.Errorf("QueueListWithCounts = %+v, %v", qs, err)
	}
	backlog := 0
	for _, q := range qs {
		backlog += q.Backlog
	}
	if c, err := s.TaskCount(ctx, store.TaskFilter{States: []string{"todo"}}); c != backlog || err != nil {
		t.Errorf("backlogs add to %d, %d todo (%v)", backlog, c, err)
	}
}
