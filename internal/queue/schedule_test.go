package queue_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	cqclock "github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// schedBundle is a store on the backend $CQ_TEST_DB chooses, with a fake
// clock.
type schedBundle struct {
	ctx   context.Context
	st    *queue.Store
	clock *cqclock.Fake
}

func schedSetup(t *testing.T, at time.Time) *schedBundle {
	t.Helper()
	clk := cqclock.NewFake(at)
	st := queue.New(storetest.Open(t))
	st.Now = clk.Now
	st.Boot = cqclock.Following(clk.Now)
	return &schedBundle{ctx: context.Background(), st: st, clock: clk}
}

func (b *schedBundle) add(t *testing.T, name, expr, tz, catchUp, overlap string) {
	t.Helper()
	d := queue.ScheduleDef{Name: name, Expr: expr, TZ: tz, CatchUp: catchUp, Overlap: overlap,
		Spec: queue.Spec{Cmd: []string{"echo", name}, Cwd: "/"}}
	if _, err := b.st.ScheduleAdd(b.ctx, d, false); err != nil {
		t.Fatalf("ScheduleAdd %s: %v", name, err)
	}
}

func (b *schedBundle) fire(t *testing.T) queue.SchedulesFired {
	t.Helper()
	r, err := b.st.FireSchedules(b.ctx)
	if err != nil {
		t.Fatalf("FireSchedules: %v", err)
	}
	return r
}

// ids lists the tasks of schedule name, sorted.
func (b *schedBundle) ids(t *testing.T, name string) []string {
	t.Helper()
	tasks, err := b.st.List(b.ctx, queue.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		if strings.HasPrefix(task.ID, name+"@") {
			out = append(out, task.ID)
		}
	}
	slices.Sort(out)
	return out
}

// skippedEvents are the data of the schedule.skipped events.
func (b *schedBundle) skippedEvents(t *testing.T) []map[string]any {
	t.Helper()
	evs, err := b.st.Events(b.ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range evs {
		if e.Kind == "schedule.skipped" {
			var m map[string]any
			if err := json.Unmarshal(e.Data, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	return out
}

func slotIDs(name string, from time.Time, step time.Duration, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, queue.SlotID(name, from.Add(time.Duration(i)*step)))
	}
	return out
}

// TestScheduleEveryMinuteForAnHour: the clock advanced minute by minute
// over an hour, a pass after each step: exactly 60 tasks, one per slot,
// with the slots' ids; passes repeated at the same instant make none.
func TestScheduleEveryMinuteForAnHour(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	b := schedSetup(t, t0.Add(-30*time.Second))
	// queue: the tasks stay todo (no worker here), which skip would see
	// as overlapping.
	b.add(t, "tick", "* * * * *", "UTC", "", "queue")
	for i := 0; i < 120; i++ {
		b.clock.Add(30 * time.Second)
		b.fire(t)
		b.fire(t) // a second pass at once finds the slot taken
	}
	got := b.ids(t, "tick")
	want := slotIDs("tick", t0, time.Minute, 60)
	if !slices.Equal(got, want) {
		t.Fatalf("tasks %d: %v\nwant %d: %v", len(got), got, len(want), want)
	}
	s, err := b.st.ScheduleGet(b.ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	if s.LastTask == nil || *s.LastTask != want[59] || s.NextSlot == nil || *s.NextSlot != queue.FormatTime(t0.Add(60*time.Minute)) {
		t.Errorf("schedule after the hour: last task %v, next %v", s.LastTask, s.NextSlot)
	}
}

// TestScheduleCatchUp: no pass for eleven slots, the newest on time: none
// and last make the newest slot's task, all makes every one; the slots
// not made are recorded as missed. With the newest slot late as well,
// none makes nothing.
func TestScheduleCatchUp(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	newest := []string{queue.SlotID("g", t0.Add(11*time.Minute))}
	for _, tc := range []struct {
		policy string
		want   []string
		missed int
	}{
		{"none", newest, 10},
		{"last", newest, 10},
		{"all", slotIDs("g", t0.Add(time.Minute), time.Minute, 11), 0},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			b := schedSetup(t, t0)
			b.add(t, "g", "* * * * *", "UTC", tc.policy, "queue")
			b.clock.Add(11*time.Minute + 30*time.Second) // slots 10:01 … 10:11, the newest 30 s old
			r := b.fire(t)
			if got := b.ids(t, "g"); !slices.Equal(got, tc.want) {
				t.Fatalf("tasks %v, want %v", got, tc.want)
			}
			missed := 0
			for _, e := range b.skippedEvents(t) {
				if e["reason"] == "missed" {
					missed += int(e["slots"].(float64))
				}
			}
			if missed != tc.missed || r.Skipped != tc.missed || r.Fired != len(tc.want) {
				t.Errorf("missed slots recorded %d, pass says %d skipped %d fired; want %d missed", missed, r.Skipped, r.Fired, tc.missed)
			}
		})
	}
	// none with the newest slot late too: nothing at all.
	b := schedSetup(t, t0)
	b.add(t, "late", "*/10 * * * *", "UTC", "none", "")
	b.clock.Add(35 * time.Minute) // slots 10:10, 10:20, 10:30; the newest 5 min old
	b.fire(t)
	if got := b.ids(t, "late"); len(got) != 0 {
		t.Errorf("none after a gap made %v", got)
	}
	b.clock.Add(5*time.Minute + 10*time.Second) // 10:40:10: on time again
	b.fire(t)
	if got := b.ids(t, "late"); !slices.Equal(got, []string{queue.SlotID("late", t0.Add(40*time.Minute))}) {
		t.Errorf("none on time made %v", got)
	}
}

// TestScheduleOverlap: with skip, a slot whose previous task is not
// finished is skipped (an event says so) and the next slot after it
// finished fires; with queue, every slot fires into one key lane.
func TestScheduleOverlap(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	b := schedSetup(t, t0)
	b.add(t, "s", "* * * * *", "UTC", "", "skip")
	b.add(t, "q", "* * * * *", "UTC", "", "queue")
	for i := 0; i < 3; i++ {
		b.clock.Add(time.Minute)
		b.fire(t)
	}
	if got := b.ids(t, "s"); !slices.Equal(got, []string{queue.SlotID("s", t0.Add(time.Minute))}) {
		t.Fatalf("skip: tasks %v, want the first slot's alone", got)
	}
	var overlaps int
	for _, e := range b.skippedEvents(t) {
		if e["reason"] == "overlap" && e["name"] == "s" && e["running"] == queue.SlotID("s", t0.Add(time.Minute)) {
			overlaps++
		}
	}
	if overlaps != 2 {
		t.Errorf("overlap events %d, want 2", overlaps)
	}
	q := b.ids(t, "q")
	if !slices.Equal(q, slotIDs("q", t0.Add(time.Minute), time.Minute, 3)) {
		t.Fatalf("queue: tasks %v", q)
	}
	for _, id := range q {
		task, err := b.st.Get(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Key == nil || *task.Key != queue.ScheduleKeyPrefix+"q" {
			t.Errorf("%s: key %v, want the schedule's lane", id, task.Key)
		}
	}
	// The first task of s ends: the next slot fires.
	first := queue.SlotID("s", t0.Add(time.Minute))
	if _, _, err := b.st.Cancel(b.ctx, first, ""); err != nil {
		t.Fatal(err)
	}
	b.clock.Add(time.Minute)
	b.fire(t)
	if got := b.ids(t, "s"); len(got) != 2 || got[1] != queue.SlotID("s", t0.Add(4*time.Minute)) {
		t.Errorf("skip after the task ended: tasks %v", got)
	}
}

// TestScheduleDaylightSaving: a 02:30 job in Europe/Berlin runs once on
// the spring-forward day (at 03:00 CEST, the first instant after the
// gap) and once on the fall-back day (at the first 02:30), passes every
// 10 minutes through both nights.
func TestScheduleDaylightSaving(t *testing.T) {
	for _, tc := range []struct {
		day  time.Time // a noon before the night
		want string    // the night's slot, UTC
	}{
		{time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), "2026-03-29T01:00:00Z"},
		{time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), "2026-10-25T00:30:00Z"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			b := schedSetup(t, tc.day)
			b.add(t, "night", "30 2 * * *", "Europe/Berlin", "", "")
			for i := 0; i < 6*24; i++ { // a day in 10-minute steps
				b.clock.Add(10 * time.Minute)
				b.fire(t)
				// Each task ends at once, so that overlap never skips.
				for _, id := range b.ids(t, "night") {
					_, _, _ = b.st.Cancel(b.ctx, id, "")
				}
			}
			if got := b.ids(t, "night"); !slices.Equal(got, []string{"night@" + tc.want}) {
				t.Errorf("tasks %v, want night@%s alone", got, tc.want)
			}
		})
	}
}

// TestScheduleAddRules: a re-add with the same definition is a no-op, with
// another a conflict unless replace; bad names, expressions, zones,
// policies and spec flags are refused; pause skips slots, resume starts
// from the next; rm keeps the tasks; run makes a task now.
func TestScheduleAddRules(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	b := schedSetup(t, t0)
	b.add(t, "a", "@hourly", "UTC", "", "")
	d := queue.ScheduleDef{Name: "a", Expr: "@hourly", TZ: "UTC", Spec: queue.Spec{Cmd: []string{"echo", "a"}, Cwd: "/"}}
	if added, err := b.st.ScheduleAdd(b.ctx, d, false); err != nil || added {
		t.Errorf("same re-add: %v, %v; want a no-op", added, err)
	}
	d.Expr = "@daily"
	if _, err := b.st.ScheduleAdd(b.ctx, d, false); !queue.IsConflict(err) {
		t.Errorf("another definition: %v, want a conflict", err)
	}
	if added, err := b.st.ScheduleAdd(b.ctx, d, true); err != nil || !added {
		t.Errorf("replace: %v, %v", added, err)
	}
	for _, bad := range []queue.ScheduleDef{
		{Name: "x@y", Expr: "@daily"}, {Name: "", Expr: "@daily"}, {Name: "b", Expr: "* * *"},
		{Name: "b", Expr: "@daily", TZ: "Nowhere/City"}, {Name: "b", Expr: "@daily", CatchUp: "some"},
		{Name: "b", Expr: "@daily", Overlap: "maybe"}, {Name: "b", Expr: "@daily", Spec: queue.Spec{ID: "fixed"}},
		{Name: "b", Expr: "@daily", Spec: queue.Spec{Delay: "1m"}}, {Name: "b", Expr: "@daily", Spec: queue.Spec{After: []string{"z"}}},
	} {
		if bad.Spec.Cmd == nil {
			bad.Spec.Cmd = []string{"true"}
		}
		if _, err := b.st.ScheduleAdd(b.ctx, bad, false); queue.KindOf(err) != queue.Invalid {
			t.Errorf("ScheduleAdd(%+v) = %v, want invalid", bad, err)
		}
	}
	b.add(t, "p", "* * * * *", "UTC", "all", "queue")
	if changed, err := b.st.SchedulePause(b.ctx, "p", true); err != nil || !changed {
		t.Fatalf("pause: %v, %v", changed, err)
	}
	b.clock.Add(5 * time.Minute)
	b.fire(t)
	if got := b.ids(t, "p"); len(got) != 0 {
		t.Errorf("paused schedule made %v", got)
	}
	if _, err := b.st.SchedulePause(b.ctx, "p", false); err != nil {
		t.Fatal(err)
	}
	b.fire(t)
	if got := b.ids(t, "p"); len(got) != 0 {
		t.Errorf("resumed schedule made the paused slots' tasks: %v", got)
	}
	b.clock.Add(time.Minute)
	b.fire(t)
	if got := b.ids(t, "p"); len(got) != 1 {
		t.Errorf("after resume: %v, want the next slot's task", got)
	}
	c, err := b.st.ScheduleRun(b.ctx, "p")
	if err != nil || !strings.HasPrefix(c.ID, "p@run-") || !c.New {
		t.Errorf("ScheduleRun = %+v, %v", c, err)
	}
	if err := b.st.ScheduleRemove(b.ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := b.st.ScheduleRemove(b.ctx, "p"); !queue.IsNotFound(err) {
		t.Errorf("second remove: %v", err)
	}
	if got := b.ids(t, "p"); len(got) != 2 {
		t.Errorf("the removed schedule's tasks: %v, want both kept", got)
	}
	if _, err := b.st.ScheduleRun(b.ctx, "p"); !queue.IsNotFound(err) {
		t.Errorf("run of a removed schedule: %v", err)
	}
}

// TestScheduleHealthWarns: cq health warns about a schedule whose newest
// task failed, and stops once a newer one did not.
func TestScheduleHealthWarns(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	b := schedSetup(t, t0)
	b.add(t, "nightly", "* * * * *", "UTC", "", "")
	b.clock.Add(time.Minute)
	b.fire(t)
	id := queue.SlotID("nightly", t0.Add(time.Minute))
	warned := func() bool {
		h, err := b.st.Health(b.ctx, queue.DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(h.Warnings, "schedule nightly ("+id+"): its last task failed")
	}
	if warned() {
		t.Fatal("warned before the task failed")
	}
	c, err := b.st.Claim(b.ctx, queue.ClaimParams{Worker: "w", Host: "h", Lease: time.Minute})
	if err != nil || c == nil || c.TaskID != id {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := b.st.FinishRun(b.ctx, c.RunID, c.Token, queue.Outcome{State: "failed", ExitCode: &one}); err != nil {
		t.Fatal(err)
	}
	if task, _ := b.st.Get(b.ctx, id); task.State != queue.TaskFailed {
		t.Fatalf("task %s is %s, want failed", id, task.State)
	}
	if !warned() {
		t.Error("no warning for the schedule whose last task failed")
	}
}

// TestScheduleFireRace: passes on several stores of one database (as
// workers and heartbeats are) take the same due slots at the same
// instant, round after round: none fails, and each slot makes one task
// and one schedule.fired event.
func TestScheduleFireRace(t *testing.T) {
	const passes, rounds = 4, 30
	t0 := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	clk := cqclock.NewFake(t0)
	b := storetest.Chosen(t)
	addr := b.New(t)
	stores := make([]*queue.Store, passes)
	for i := range stores {
		stores[i] = queue.New(b.Open(t, addr))
		stores[i].Now = clk.Now
		stores[i].Boot = cqclock.Following(clk.Now)
	}
	ctx := context.Background()
	d := queue.ScheduleDef{Name: "r", Expr: "* * * * *", TZ: "UTC", Overlap: "queue", CatchUp: "all",
		Spec: queue.Spec{Cmd: []string{"true"}, Cwd: "/"}}
	if _, err := stores[0].ScheduleAdd(ctx, d, false); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < rounds; round++ {
		clk.Add(time.Minute)
		errs := make(chan error, passes)
		start := make(chan struct{})
		for _, st := range stores {
			go func() {
				<-start
				_, err := st.FireSchedules(ctx)
				errs <- err
			}()
		}
		close(start)
		for range stores {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: FireSchedules: %v", round, err)
			}
		}
	}
	evs, err := stores[0].Events(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]int{}
	for _, e := range evs {
		if e.Kind == "schedule.fired" && e.TaskID != nil {
			fired[*e.TaskID]++
		}
	}
	if len(fired) != rounds {
		t.Errorf("%d slots fired, want %d", len(fired), rounds)
	}
	for id, n := range fired {
		if n != 1 {
			t.Errorf("%s fired %d times", id, n)
		}
	}
}
