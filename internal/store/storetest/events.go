package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// testEventOrder: a transaction's events get increasing seqs in the order
// added, EventLastSeq counts the transaction's own, and the reads list
// them in seq order with every field as written.
func testEventOrder(t *testing.T, b Backend) {
	e := newEnv(t, b)
	evs := []store.Event{
		{At: at(0), Kind: "task.created", TaskID: "t1", To: "inbox"},
		{At: at(1), Kind: "run.started", TaskID: "t2", RunID: "r1", From: "queued", To: "running", Reason: "because", Data: `{"pid":12}`},
		{At: at(2), Kind: "task.cancelled", TaskID: "t1", From: "todo", To: "cancelled"},
		{At: at(3), Kind: "queue.paused", Data: `{"queue":"q"}`},
		{At: at(4), Kind: "task.cancelled", TaskID: "t2", From: "inbox", To: "cancelled"},
	}
	var lastIn int64
	var cancelled []string
	e.write(func(tx store.Tx) error {
		last, err := tx.EventLastSeq(ctx)
		if err != nil || last != 0 {
			return fmt.Errorf("EventLastSeq of a new store = %d, %w; want 0", last, err)
		}
		for _, ev := range evs[:4] {
			if err := tx.EventAdd(ctx, ev); err != nil {
				return err
			}
		}
		if lastIn, err = tx.EventLastSeq(ctx); err != nil {
			return err
		}
		if err := tx.EventAdd(ctx, evs[4]); err != nil {
			return err
		}
		cancelled, err = tx.EventCancelledTasks(ctx, 0)
		return err
	})
	got := e.events()
	if len(got) != len(evs) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(evs), got)
	}
	for i, ev := range got {
		if ev.Event != evs[i] {
			t.Errorf("event %d: %+v, want %+v", i, ev.Event, evs[i])
		}
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Errorf("seq %d after %d", ev.Seq, got[i-1].Seq)
		}
	}
	if lastIn != got[3].Seq {
		t.Errorf("seqs %d…%d; EventLastSeq said %d before the last", got[0].Seq, got[4].Seq, lastIn)
	}
	if !slices.Equal(cancelled, []string{"t1", "t2"}) {
		t.Errorf("EventCancelledTasks = %v, want [t1 t2]", cancelled)
	}
	if last, err := e.s.EventLastSeq(ctx); last != got[4].Seq || err != nil {
		t.Errorf("EventLastSeq = %d, %v; want %d", last, err, got[4].Seq)
	}
	// The next transaction's.
	e.write(func(tx store.Tx) error {
		if err := tx.EventAdd(ctx, store.Event{At: at(5), Kind: "task.cancelled", TaskID: "t3"}); err != nil {
			return err
		}
		if c, err := tx.EventCancelledTasks(ctx, got[4].Seq); !slices.Equal(c, []string{"t3"}) || err != nil {
			return fmt.Errorf("EventCancelledTasks after seq %d = %v, %w; want [t3]", got[4].Seq, c, err)
		}
		return nil
	})
	got = e.events()
	if s := got[len(got)-1].Seq; s <= got[4].Seq {
		t.Errorf("seq %d after seq %d", s, got[4].Seq)
	}
	var page []int64
	if err := e.s.EventList(ctx, got[1].Seq, 2, func(ev *store.EventRecord) { page = append(page, ev.Seq) }); err != nil ||
		!slices.Equal(page, []int64{got[2].Seq, got[3].Seq}) {
		t.Errorf("EventList(after %d, 2) = %v, %v", got[1].Seq, page, err)
	}
	var ofTask []store.Event
	for _, ev := range e.taskEvents("t1") {
		ofTask = append(ofTask, ev.Event)
	}
	if want := []store.Event{evs[0], evs[2]}; !slices.Equal(ofTask, want) {
		t.Errorf("EventListOfTask(t1) = %+v, want %+v", ofTask, want)
	}
}

// testWriteRollsBack: a Write whose function fails stores nothing, and
// returns that error; a savepoint rolled back to undoes what followed it.
func testWriteRollsBack(t *testing.T, b Backend) {
	e := newEnv(t, b)
	errFail := errors.New("fail")
	err := e.s.Write(ctx, func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "a"}, at(0)); err != nil {
			return err
		}
		if err := tx.SystemStateSet(ctx, "k", "v", at(0)); err != nil {
			return err
		}
		if err := tx.EventAdd(ctx, store.Event{At: at(0), Kind: "x"}); err != nil {
			return err
		}
		return errFail
	})
	if !errors.Is(err, errFail) {
		t.Fatalf("Write returned %v, want its function's error", err)
	}
	if ok, err := e.s.TaskExists(ctx, "a"); ok || err != nil {
		t.Errorf("the task was stored: %v, %v", ok, err)
	}
	if ok, err := e.s.QueueExists(ctx, "q"); ok || err != nil {
		t.Errorf("the queue was stored: %v, %v", ok, err)
	}
	if _, ok, err := e.s.SystemStateGet(ctx, "k"); ok || err != nil {
		t.Errorf("the system state was stored: %v, %v", ok, err)
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("events stored: %+v", evs)
	}
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "a"}, at(0)); err != nil {
			return err
		}
		if err := tx.Savepoint("one"); err != nil {
			return err
		}
		if err := enqueue(tx, store.Task{ID: "b"}, at(1)); err != nil {
			return err
		}
		if err := tx.Savepoint("two"); err != nil {
			return err
		}
		if err := enqueue(tx, store.Task{ID: "c"}, at(2)); err != nil {
			return err
		}
		if err := tx.RollbackTo("one"); err != nil {
			return err
		}
		if ok, err := tx.TaskExists(ctx, "b"); ok || err != nil {
			return fmt.Errorf("b still there after RollbackTo: %v, %w", ok, err)
		}
		if err := enqueue(tx, store.Task{ID: "d"}, at(3)); err != nil {
			return err
		}
		return tx.Release("one")
	})
	var got []string
	if err := e.s.TaskListIDs(ctx, store.TaskFilter{}, func(id string) error { got = append(got, id); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"d", "a"}) {
		t.Errorf("tasks %v after the savepoints, want [d a]", got)
	}
	var kinds []string
	for _, ev := range e.events() {
		kinds = append(kinds, ev.Kind+" "+ev.TaskID)
	}
	if want := []string{"task.created a", "task.todo a", "task.created d", "task.todo d"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

// raceEvent is the data of an event of testEventRace.
type raceEvent struct {
	Racer, Tx, I, K int
}

// testEventRace: racers append events, one to three per transaction,
// while a reader follows the log by seq: seqs increase in the order added
// and in commit order (each transaction's events are consecutive, and the
// follower, reading only above the last seq it saw, misses none),
// and nothing is lost.
func testEventRace(t *testing.T, b Backend) {
	const txs = 15
	runRace(t, b, race{
		work: func(s store.Store, racer int) error {
			for j := range txs {
				err := s.Write(ctx, func(tx store.Tx) error {
					k := 1 + (j+racer)%3
					for i := range k {
						d, _ := json.Marshal(raceEvent{Racer: racer, Tx: j, I: i, K: k})
						if err := tx.EventAdd(ctx, store.Event{At: at(j), Kind: "race", Data: string(d)}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
		watch: func(s store.Store, done <-chan struct{}) error {
			var seen []int64
			var last int64
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for stopping := false; ; {
				n := 0
				err := s.EventList(ctx, last, 100, func(ev *store.EventRecord) {
					seen = append(seen, ev.Seq)
					last = ev.Seq
					n++
				})
				if err != nil {
					return err
				}
				if stopping && n == 0 {
					break
				}
				select {
				case <-done:
					stopping = true
				case <-tick.C:
				}
			}
			all, err := allEvents(s)
			if err != nil {
				return err
			}
			var want []int64
			for _, ev := range all {
				want = append(want, ev.Seq)
			}
			if !slices.Equal(seen, want) {
				return fmt.Errorf("following the log by seq read %d events, the log has %d: a seq committed below one already read", len(seen), len(want))
			}
			return nil
		},
		check: func(e *env, racers []int) {
			evs := e.events()
			want := 0
			for _, r := range racers {
				for j := range txs {
					want += 1 + (j+r)%3
				}
			}
			if len(evs) != want {
				e.t.Errorf("%d events, want %d", len(evs), want)
			}
			lastTx := map[int]int{}
			for i := 0; i < len(evs); {
				var d raceEvent
				if err := json.Unmarshal([]byte(evs[i].Data), &d); err != nil {
					e.t.Fatalf("event %d: %v", evs[i].Seq, err)
				}
				if d.I != 0 {
					e.t.Fatalf("event %d is %+v: want a transaction's first", evs[i].Seq, d)
				}
				if prev, ok := lastTx[d.Racer]; ok && prev >= d.Tx {
					e.t.Fatalf("racer %d: transaction %d after %d", d.Racer, d.Tx, prev)
				}
				lastTx[d.Racer] = d.Tx
				for k := range d.K {
					if i+k >= len(evs) {
						e.t.Fatalf("racer %d transaction %d: events missing at the end", d.Racer, d.Tx)
					}
					var dk raceEvent
					_ = json.Unmarshal([]byte(evs[i+k].Data), &dk)
					if dk.Racer != d.Racer || dk.Tx != d.Tx || dk.I != k || (k > 0 && evs[i+k].Seq <= evs[i+k-1].Seq) {
						e.t.Fatalf("racer %d transaction %d: its event %d is not next (seq %d holds %+v)", d.Racer, d.Tx, k, evs[i+k].Seq, dk)
					}
				}
				i += d.K
			}
			for _, r := range racers {
				if lastTx[r] != txs-1 {
					e.t.Errorf("racer %d: last transaction %d, want %d", r, lastTx[r], txs-1)
				}
			}
		},
	})
}
