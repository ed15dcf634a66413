// The tests of recurring schedules' rows.

package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

func sched(name string) store.Schedule {
	return store.Schedule{Name: name, Expr: "*/5 * * * *", TZ: "Europe/Berlin", Spec: `{"cmd":["true"]}`,
		CatchUp: "last", Overlap: "skip", LastSlot: at(0), CreatedAt: at(0), UpdatedAt: at(0)}
}

// testSchedules: a schedule is added once; read back whole; listed by
// name; replaced keeping its pause, last task and creation; advanced only
// from the slot it was read at; paused and resumed once each; deleted.
func testSchedules(t *testing.T, b Backend) {
	e := newEnv(t, b)
	e.write(func(tx store.Tx) error {
		for _, n := range []string{"nightly", "backup"} {
			if ok, err := tx.ScheduleAdd(ctx, sched(n)); !ok || err != nil {
				return fmt.Errorf("ScheduleAdd %s: %v, %w", n, ok, err)
			}
		}
		other := sched("nightly")
		other.Expr = "@daily"
		if ok, err := tx.ScheduleAdd(ctx, other); ok || err != nil {
			return fmt.Errorf("ScheduleAdd of an existing name applied: %v, %w", ok, err)
		}
		return nil
	})
	got, err := e.s.ScheduleGet(ctx, "nightly")
	if err != nil || *got != sched("nightly") {
		t.Fatalf("ScheduleGet = %+v, %v; want %+v", got, err, sched("nightly"))
	}
	if _, err := e.s.ScheduleGet(ctx, "none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ScheduleGet of none = %v, want ErrNotFound", err)
	}
	list, err := e.s.ScheduleList(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "backup" || list[1].Name != "nightly" {
		t.Fatalf("ScheduleList = %+v, %v", list, err)
	}
	e.write(func(tx store.Tx) error {
		if ok, err := tx.ScheduleAdvance(ctx, "nightly", at(0), at(300), "nightly@1", at(301)); !ok || err != nil {
			return fmt.Errorf("first advance: %v, %w", ok, err)
		}
		// Read at slot 0 by another pass: the slots are taken.
		if ok, err := tx.ScheduleAdvance(ctx, "nightly", at(0), at(600), "nightly@2", at(601)); ok || err != nil {
			return fmt.Errorf("advance from a stale slot applied: %v, %w", ok, err)
		}
		// A skipped slot moves on and keeps the last task.
		if ok, err := tx.ScheduleAdvance(ctx, "nightly", at(300), at(600), "", at(602)); !ok || err != nil {
			return fmt.Errorf("advance without a task: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleSetPaused(ctx, "nightly", true, at(603)); !ok || err != nil {
			return fmt.Errorf("pause: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleSetPaused(ctx, "nightly", true, at(604)); ok || err != nil {
			return fmt.Errorf("second pause applied: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleSetLastTask(ctx, "nightly", "nightly@run", at(605)); !ok || err != nil {
			return fmt.Errorf("ScheduleSetLastTask: %v, %w", ok, err)
		}
		r := sched("nightly")
		r.Expr, r.TZ, r.Spec, r.CatchUp, r.Overlap, r.LastSlot, r.UpdatedAt = "@hourly", "UTC", `{"shell":"date"}`, "all", "queue", at(700), at(700)
		if ok, err := tx.ScheduleReplace(ctx, r); !ok || err != nil {
			return fmt.Errorf("ScheduleReplace: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleReplace(ctx, sched("none")); ok || err != nil {
			return fmt.Errorf("ScheduleReplace of none applied: %v, %w", ok, err)
		}
		return nil
	})
	got, err = e.s.ScheduleGet(ctx, "nightly")
	want := store.Schedule{Name: "nightly", Expr: "@hourly", TZ: "UTC", Spec: `{"shell":"date"}`, CatchUp: "all", Overlap: "queue",
		Paused: true, LastSlot: at(700), LastTask: "nightly@run", CreatedAt: at(0), UpdatedAt: at(700)}
	if err != nil || *got != want {
		t.Fatalf("after the changes ScheduleGet = %+v, %v; want %+v", got, err, want)
	}
	e.write(func(tx store.Tx) error {
		if ok, err := tx.ScheduleSetPaused(ctx, "nightly", false, at(800)); !ok || err != nil {
			return fmt.Errorf("resume: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleDelete(ctx, "nightly"); !ok || err != nil {
			return fmt.Errorf("ScheduleDelete: %v, %w", ok, err)
		}
		if ok, err := tx.ScheduleDelete(ctx, "nightly"); ok || err != nil {
			return fmt.Errorf("second ScheduleDelete applied: %v, %w", ok, err)
		}
		return nil
	})
	if list, err := e.s.ScheduleList(ctx); err != nil || len(list) != 1 || list[0].Name != "backup" {
		t.Fatalf("after the delete ScheduleList = %+v, %v", list, err)
	}
}

// testScheduleAdvanceRace: racers each try to take every slot of one
// schedule, each from the slot they read; every slot is taken once.
func testScheduleAdvanceRace(t *testing.T, b Backend) {
	const slots = 15
	runRace(t, b, race{
		setup: func(e *env) {
			e.write(func(tx store.Tx) error {
				_, err := tx.ScheduleAdd(ctx, sched("s"))
				return err
			})
		},
		work: func(s store.Store, racer int) error {
			for i := 1; i <= slots; i++ {
				err := s.Write(ctx, func(tx store.Tx) error {
					cur, err := tx.ScheduleGet(ctx, "s")
					if err != nil || cur.LastSlot >= at(i) {
						return err
					}
					ok, err := tx.ScheduleAdvance(ctx, "s", cur.LastSlot, at(i), fmt.Sprintf("s@%d", i), at(i))
					if err != nil || !ok {
						return err
					}
					return tx.EventAdd(ctx, store.Event{At: at(i), Kind: "schedule.fired", Data: fmt.Sprintf(`{"slot":%d,"racer":%d}`, i, racer)})
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
		check: func(e *env, _ []int) {
			fired := map[string]int{}
			for _, ev := range e.events() {
				if ev.Kind == "schedule.fired" {
					var slot, racer int
					if _, err := fmt.Sscanf(ev.Data, `{"slot":%d,"racer":%d}`, &slot, &racer); err != nil {
						e.t.Fatalf("event data %q: %v", ev.Data, err)
					}
					fired[fmt.Sprint(slot)]++
				}
			}
			for i := 1; i <= slots; i++ {
				if n := fired[fmt.Sprint(i)]; n != 1 {
					e.t.Errorf("slot %d fired %d times, want once", i, n)
				}
			}
			if s, err := e.s.ScheduleGet(ctx, "s"); err != nil || s.LastSlot != at(slots) || s.LastTask != fmt.Sprintf("s@%d", slots) {
				e.t.Errorf("the schedule ends at %+v, %v", s, err)
			}
		},
	})
}
