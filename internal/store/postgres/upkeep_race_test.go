package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
)

// TestCleanupRaces: what cleanup keeps with other writers at once. A
// deletion waits for an enqueue that read the dependency under its lock,
// then records how the dependency ended on the new edge; cleanups at once
// delete each task once, and all of them.
func TestCleanupRaces(t *testing.T) {
	ctx := context.Background()
	d, err := postgres.Open(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Pool.Exec(ctx, `INSERT INTO tasks (id, state, queue, priority, spec, created_at, updated_at, finished_at)
		SELECT 't' || lpad(i::text, 4, '0'), 'failed', 'q', 1, '{}', '2030', '2030', '2030-01-01T00:00:00.000Z'
		FROM generate_series(1, 1000) i`); err != nil {
		t.Fatal(err)
	}
	s := d.Store()

	locked, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := s.Write(ctx, func(tx store.Tx) error {
			if err := tx.TaskCreateInbox(ctx, store.Task{ID: "w", Queue: "q", Spec: "{}", DepsLeft: 1}, "2030"); err != nil {
				return err
			}
			if err := tx.TaskDepsAdd(ctx, "w", []string{"t0001"}); err != nil {
				return err
			}
			if dep, _, err := tx.TaskDeadDependency(ctx, "w"); err != nil || dep != "t0001" {
				t.Errorf("TaskDeadDependency(w) = %q, %v", dep, err)
			}
			close(locked)
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}()
	<-locked
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Write(ctx, func(tx store.Tx) error {
			_, _, err := tx.TaskDelete(ctx, "failed", []string{"t0001", "t0002"})
			return err
		}); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
		t.Fatal("the deletion did not wait for the enqueue holding its dependency's lock")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	<-done
	wg.Wait()
	if dep, st, err := s.TaskDeadDependency(ctx, "w"); dep != "t0001" || st != "failed" || err != nil {
		t.Errorf("TaskDeadDependency(w) after the deletion = %q, %q, %v; want t0001, failed", dep, st, err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	var cw sync.WaitGroup
	for range 8 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for {
				var deleted []string
				if err := s.Write(ctx, func(tx store.Tx) error {
					ids, err := tx.TaskExpiredList(ctx, "failed", "2031", 50)
					if err != nil {
						return err
					}
					deleted, _, err = tx.TaskDelete(ctx, "failed", ids)
					return err
				}); err != nil {
					t.Error(err)
					return
				}
				if len(deleted) == 0 {
					return
				}
				mu.Lock()
				for _, id := range deleted {
					seen[id]++
				}
				mu.Unlock()
			}
		}()
	}
	cw.Wait()
	if len(seen) != 998 {
		t.Errorf("the cleanups deleted %d tasks, want 998", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s deleted %d times", id, n)
		}
	}
}
