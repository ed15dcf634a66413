package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

func needSchema(t *testing.T, b Backend) *Schema {
	t.Helper()
	if b.Schema == nil {
		t.Skipf("%s gives no schema hooks", b.Name)
	}
	return b.Schema
}

// testMigrateNew: a new database is migrated to the latest version when
// opened, and opening it again keeps what it holds.
func testMigrateNew(t *testing.T, b Backend) {
	sc := needSchema(t, b)
	e := newEnv(t, b)
	if v := sc.Version(t, e.addr); v != sc.Latest {
		t.Fatalf("schema version %d after Open, want %d", v, sc.Latest)
	}
	e.write(func(tx store.Tx) error { return enqueue(tx, store.Task{ID: "a"}, at(0)) })
	again := b.Open(t, e.addr)
	if v := sc.Version(t, e.addr); v != sc.Latest {
		t.Fatalf("schema version %d after a second Open, want %d", v, sc.Latest)
	}
	if tk, err := again.TaskGet(ctx, "a"); err != nil || *tk != e.task("a") {
		t.Fatalf("after a second Open: %v, %v", tk, err)
	}
}

// wantKept checks that the store holds KeptData.
func wantKept(t *testing.T, s store.Store) {
	t.Helper()
	tk, err := s.TaskGet(ctx, KeptID)
	if err != nil {
		t.Fatalf("the kept task: %v", err)
	}
	want := store.Task{ID: KeptID, State: "done", Queue: KeptID, Priority: 1, Seq: 2, Spec: "{}", CreatedAt: KeptAt, UpdatedAt: KeptAt, FinishedAt: KeptAt}
	if *tk != want {
		t.Errorf("the kept task:\ngot  %+v\nwant %+v", *tk, want)
	}
	if q, err := s.QueueGet(ctx, KeptID); err != nil || *q != defaultQueue(KeptID) {
		t.Errorf("the kept queue: %v, %v", q, err)
	}
	var kinds []string
	if err := s.EventListOfTask(ctx, KeptID, func(ev *store.EventRecord) { kinds = append(kinds, ev.Kind) }); err != nil ||
		fmt.Sprint(kinds) != "[task.created task.done]" {
		t.Errorf("the kept events: %v, %v", kinds, err)
	}
	if v, ok, err := s.SystemStateGet(ctx, KeptID); v != "yes" || !ok || err != nil {
		t.Errorf("the kept system state: %q, %v, %v", v, ok, err)
	}
}

// testMigrateOlder: a database at each older version is migrated forward
// when opened, keeping its data, and then works: its kept task's events
// can be swept after its deletion, new tasks enter lanes.
func testMigrateOlder(t *testing.T, b Backend) {
	sc := needSchema(t, b)
	for v := 1; v < sc.Latest; v++ {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			t.Parallel()
			e := &env{t: t, b: b, addr: b.New(t)}
			sc.Make(t, e.addr, v)
			if got := sc.Version(t, e.addr); got != v {
				t.Fatalf("Make(%d) made version %d", v, got)
			}
			e.s = b.Open(t, e.addr)
			if got := sc.Version(t, e.addr); got != sc.Latest {
				t.Fatalf("version %d after Open, want %d", got, sc.Latest)
			}
			wantKept(t, e.s)
			e.write(func(tx store.Tx) error {
				for _, id := range []string{"a", "b"} {
					if err := enqueue(tx, store.Task{ID: id, Key: "k"}, at(0)); err != nil {
						return err
					}
				}
				if err := tx.TaskDepsAdd(ctx, "b", []string{KeptID}); err != nil {
					return err
				}
				deleted, spans, err := tx.TaskDelete(ctx, "done", []string{KeptID})
				if err != nil || len(deleted) != 1 || len(spans) != 1 {
					return fmt.Errorf("TaskDelete(kept) = %v, %v, %w", deleted, spans, err)
				}
				_, err = tx.EventSweep(ctx, spans[0].First, spans[0].End)
				return err
			})
			if a, b := e.task("a"), e.task("b"); !a.LaneHead || b.LaneHead {
				t.Errorf("lane heads: a %v, b %v", a.LaneHead, b.LaneHead)
			}
			if evs := e.taskEvents(KeptID); len(evs) != 0 {
				t.Errorf("the kept task's events after the sweep: %+v", evs)
			}
			if dep, _, err := e.s.TaskDeadDependency(ctx, "b"); dep != "" || err != nil {
				t.Errorf("TaskDeadDependency(b) = %q, %v", dep, err)
			}
		})
	}
}

// testMigrateNewerRefused: a database of a newer schema version is
// refused with ErrFutureSchema and left untouched.
func testMigrateNewerRefused(t *testing.T, b Backend) {
	sc := needSchema(t, b)
	addr := b.New(t)
	sc.Make(t, addr, sc.Latest)
	sc.SetVersion(t, addr, sc.Latest+1)
	before := sc.Contents(t, addr)
	s, err := sc.TryOpen(t, addr)
	if !errors.Is(err, store.ErrFutureSchema) {
		t.Fatalf("Open of a newer schema: %v, %v; want ErrFutureSchema", s, err)
	}
	if after := sc.Contents(t, addr); after != before {
		t.Errorf("the refused database changed:\nbefore %s\nafter  %s", before, after)
	}
	if v := sc.Version(t, addr); v != sc.Latest+1 {
		t.Errorf("its version is %d, want %d", v, sc.Latest+1)
	}
	// Set back to the latest, it opens with its data.
	sc.SetVersion(t, addr, sc.Latest)
	wantKept(t, b.Open(t, addr))
}

// testMigrateConcurrentOpen: several openers of one new database at once
// all succeed, and it is migrated once.
func testMigrateConcurrentOpen(t *testing.T, b Backend) {
	sc := needSchema(t, b)
	addr := b.New(t)
	const n = 6
	start := make(chan struct{})
	var wg sync.WaitGroup
	stores := make([]store.Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = sc.TryOpen(t, addr)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
	}
	if v := sc.Version(t, addr); v != sc.Latest {
		t.Fatalf("version %d, want %d", v, sc.Latest)
	}
	for i, s := range stores {
		if err := s.Write(ctx, func(tx store.Tx) error { return enqueue(tx, store.Task{ID: fmt.Sprint(i)}, at(i)) }); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	if n2, err := stores[0].TaskCount(ctx, store.TaskFilter{}); n2 != n || err != nil {
		t.Errorf("%d tasks, %v; want %d", n2, err, n)
	}
}
