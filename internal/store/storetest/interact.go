// The tests of runs that talk back: questions, messages and progress.

package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// testAsks: a question is open until answered once (a second answer does
// not apply); the open ones of live runs are listed; denying a run's open
// questions closes those and no other; they go with their task.
func testAsks(t *testing.T, b Backend) {
	e := newEnv(t, b)
	var a1, a2, a3 int64
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"a", "b"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		if err := claim(tx, "q", "w1", "h", at(1), wallLease(at(60)), "a", "b"); err != nil {
			return err
		}
		var err error
		if a1, err = tx.AskAdd(ctx, store.Ask{RunID: "run-a", TaskID: "a", Question: "deploy?", AskedAt: at(2), ExpiresAt: at(300)}); err != nil {
			return err
		}
		if a2, err = tx.AskAdd(ctx, store.Ask{RunID: "run-a", TaskID: "a", Question: "again?", AskedAt: at(3)}); err != nil {
			return err
		}
		a3, err = tx.AskAdd(ctx, store.Ask{RunID: "run-b", TaskID: "b", Question: "b?", AskedAt: at(4)})
		return err
	})
	if a1 >= a2 || a2 >= a3 {
		t.Fatalf("ask ids %d, %d, %d: want increasing", a1, a2, a3)
	}
	got, err := e.s.AskGet(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Ask{ID: a1, RunID: "run-a", TaskID: "a", Question: "deploy?", State: "open", AskedAt: at(2), ExpiresAt: at(300)}
	if *got != want {
		t.Errorf("AskGet = %+v, want %+v", *got, want)
	}
	if _, err := e.s.AskGet(ctx, a3+100); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AskGet of none = %v, want ErrNotFound", err)
	}
	open, err := e.s.AskListOpen(ctx)
	if err != nil || len(open) != 3 || open[0].ID != a1 || open[2].ID != a3 {
		t.Fatalf("AskListOpen = %+v, %v", open, err)
	}
	e.write(func(tx store.Tx) error {
		if ok, err := tx.AskAnswer(ctx, store.AskAnswer{ID: a1, To: "approved", Reason: "go", At: at(5)}); !ok || err != nil {
			return fmt.Errorf("first answer: %v, %w", ok, err)
		}
		if ok, err := tx.AskAnswer(ctx, store.AskAnswer{ID: a1, To: "denied", At: at(6)}); ok || err != nil {
			return fmt.Errorf("second answer applied: %v, %w", ok, err)
		}
		closed, err := tx.AskDenyOpenOfRuns(ctx, []string{"run-a", "run-x"}, "cancelled", at(7))
		if err != nil {
			return err
		}
		if len(closed) != 1 || closed[0].ID != a2 || closed[0].State != "denied" || closed[0].Reason != "cancelled" || closed[0].AnsweredAt != at(7) {
			return fmt.Errorf("AskDenyOpenOfRuns = %+v, want a2 alone, denied", closed)
		}
		return nil
	})
	as, err := e.s.AskListOfTask(ctx, "a")
	if err != nil || len(as) != 2 {
		t.Fatalf("AskListOfTask = %+v, %v", as, err)
	}
	if as[0].State != "approved" || as[0].Reason != "go" || as[0].AnsweredAt != at(5) || as[1].State != "denied" {
		t.Errorf("AskListOfTask = %+v", as)
	}
	// A run that ended takes its open question out of the open list.
	e.write(func(tx store.Tx) error {
		ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-b", From: "queued", To: "cancelled"})
		if !ok || err != nil {
			return fmt.Errorf("end run-b: %v, %w", ok, err)
		}
		return nil
	})
	if open, err := e.s.AskListOpen(ctx); err != nil || len(open) != 0 {
		t.Errorf("AskListOpen after the answers and run-b's end = %+v, %v", open, err)
	}
	e.write(func(tx store.Tx) error {
		if err := finish(tx, "a", "doing", "cancelled", at(8)); err != nil {
			return err
		}
		_, _, err := tx.TaskDelete(ctx, "cancelled", []string{"a"})
		return err
	})
	if as, err := e.s.AskListOfTask(ctx, "a"); err != nil || len(as) != 0 {
		t.Errorf("AskListOfTask after the task's deletion = %+v, %v", as, err)
	}
}

// testMessages: messages are taken once, in the order sent, by the first
// run that takes them, whatever the number of takers racing.
func testMessages(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "a"}, at(0)); err != nil {
			return err
		}
		if err := claim(tx, "q", "w1", "h", at(1), wallLease(at(60)), "a"); err != nil {
			return err
		}
		for i := range 3 {
			if _, err := tx.MessageAdd(ctx, store.Message{TaskID: "a", Body: fmt.Sprintf("m%d", i), SentAt: at(2 + i), SentRun: "run-a"}); err != nil {
				return err
			}
		}
		return nil
	})
	var got []store.Message
	e.write(func(tx store.Tx) error {
		var err error
		got, err = tx.MessagesTake(ctx, "a", "run-a", at(9))
		return err
	})
	if len(got) != 3 || got[0].Body != "m0" || got[2].Body != "m2" || got[1].RecvRun != "run-a" || got[1].RecvAt != at(9) || got[0].SentRun != "run-a" {
		t.Fatalf("MessagesTake = %+v", got)
	}
	e.write(func(tx store.Tx) error {
		ms, err := tx.MessagesTake(ctx, "a", "run-a", at(10))
		if err != nil || len(ms) != 0 {
			return fmt.Errorf("second MessagesTake = %+v, %w", ms, err)
		}
		return nil
	})
	// Many takers race over many messages: each is taken once.
	const n = 40
	e.write(func(tx store.Tx) error {
		for i := range n {
			if _, err := tx.MessageAdd(ctx, store.Message{TaskID: "a", Body: fmt.Sprintf("r%d", i), SentAt: at(20)}); err != nil {
				return err
			}
		}
		return nil
	})
	var mu sync.Mutex
	taken := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				var ms []store.Message
				err := e.s.Write(ctx, func(tx store.Tx) error {
					var err error
					ms, err = tx.MessagesTake(ctx, "a", fmt.Sprintf("run-%d", w), at(21))
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, m := range ms {
					taken[m.Body]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(taken) != n {
		t.Errorf("%d messages taken, want %d", len(taken), n)
	}
	for body, k := range taken {
		if k != 1 {
			t.Errorf("message %s taken %d times", body, k)
		}
	}
	all, err := e.s.MessageListOfTask(ctx, "a")
	if err != nil || len(all) != 3+n || all[0].Body != "m0" || all[3].Body != "r0" {
		t.Errorf("MessageListOfTask = %d messages, %v", len(all), err)
	}
}

// testRunProgress: a run's progress is replaced by each put; the pending
// ones are listed by the time of their last event.
func testRunProgress(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, id := range []string{"a", "b", "c"} {
			if err := enqueue(tx, store.Task{ID: id}, at(0)); err != nil {
				return err
			}
		}
		if err := claim(tx, "q", "w1", "h", at(1), wallLease(at(60)), "a", "b", "c"); err != nil {
			return err
		}
		for _, p := range []store.RunProgress{
			{RunID: "run-a", TaskID: "a", Done: 1, Total: 10, Message: "one", At: at(2), EventAt: at(2)},
			{RunID: "run-a", TaskID: "a", Done: 2, Total: 10, Message: "two", At: at(3), EventAt: at(2), Pending: true},
			{RunID: "run-b", TaskID: "b", Done: -1, Total: -1, Message: "msg only", At: at(4), Pending: true},
			{RunID: "run-c", TaskID: "c", Done: 5, Total: -1, At: at(4), EventAt: at(4)},
		} {
			if err := tx.RunProgressPut(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	p, err := e.s.RunProgressGet(ctx, "run-a")
	want := store.RunProgress{RunID: "run-a", TaskID: "a", Done: 2, Total: 10, Message: "two", At: at(3), EventAt: at(2), Pending: true}
	if err != nil || *p != want {
		t.Fatalf("RunProgressGet = %+v, %v; want %+v", p, err, want)
	}
	got := map[string]store.RunProgress{}
	if err := e.s.RunProgressOfRuns(ctx, []string{"run-b", "run-c", "run-x"}, func(p *store.RunProgress) { got[p.RunID] = *p }); err != nil {
		t.Fatal(err)
	}
	wantOf := map[string]store.RunProgress{
		"run-b": {RunID: "run-b", TaskID: "b", Done: -1, Total: -1, Message: "msg only", At: at(4), Pending: true},
		"run-c": {RunID: "run-c", TaskID: "c", Done: 5, Total: -1, At: at(4), EventAt: at(4)},
	}
	if !reflect.DeepEqual(got, wantOf) {
		t.Errorf("RunProgressOfRuns = %+v, want %+v", got, wantOf)
	}
	if _, err := e.s.RunProgressGet(ctx, "run-x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunProgressGet of none = %v, want ErrNotFound", err)
	}
	live := map[string]bool{}
	e.write(func(tx store.Tx) error {
		ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-c", From: "queued", To: "cancelled"})
		if !ok || err != nil {
			return fmt.Errorf("end run-c: %v, %w", ok, err)
		}
		return nil
	})
	if err := e.s.RunProgressLive(ctx, func(p *store.RunProgress) { live[p.RunID] = true }); err != nil || !reflect.DeepEqual(live, map[string]bool{"run-a": true, "run-b": true}) {
		t.Errorf("RunProgressLive = %v, %v; want run-a and run-b (run-c ended)", live, err)
	}
	pend, err := e.s.RunProgressPendingList(ctx, at(1), 10)
	if err != nil || len(pend) != 1 || pend[0].RunID != "run-b" {
		t.Errorf("RunProgressPendingList(before the first event) = %+v, %v; want run-b alone (no event yet)", pend, err)
	}
	pend, err = e.s.RunProgressPendingList(ctx, at(2), 10)
	if err != nil || len(pend) != 2 {
		t.Errorf("RunProgressPendingList(at 2) = %+v, %v; want run-a and run-b", pend, err)
	}
	// Settling applies only to the values it was read with.
	e.write(func(tx store.Tx) error {
		stale := want
		stale.Done = 1
		if ok, err := tx.RunProgressSettle(ctx, stale, at(5)); ok || err != nil {
			return fmt.Errorf("settle of stale values: %v, %w", ok, err)
		}
		for _, p := range pend {
			if ok, err := tx.RunProgressSettle(ctx, p, at(5)); !ok || err != nil {
				return fmt.Errorf("settle of %s: %v, %w", p.RunID, ok, err)
			}
		}
		if ok, err := tx.RunProgressSettle(ctx, want, at(6)); ok || err != nil {
			return fmt.Errorf("second settle: %v, %w", ok, err)
		}
		return nil
	})
	p, err = e.s.RunProgressGet(ctx, "run-b")
	if wantB := (store.RunProgress{RunID: "run-b", TaskID: "b", Done: -1, Total: -1, Message: "msg only", At: at(4), EventAt: at(5)}); err != nil || *p != wantB {
		t.Errorf("run-b after its settle = %+v, %v; want %+v", p, err, wantB)
	}
	if pend, err := e.s.RunProgressPendingList(ctx, at(9), 10); err != nil || len(pend) != 0 {
		t.Errorf("RunProgressPendingList after the settles = %+v, %v", pend, err)
	}
}
