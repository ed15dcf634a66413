package main

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestScheduleRace: worker processes (each taking slots at their time)
// and cq heartbeat loops race over the slots of an every-second schedule
// for several seconds, on the backend $CQ_TEST_DB chooses: every slot
// fires once (one schedule.fired event, one task), none is skipped, and
// the slots follow each other with no gap.
func TestScheduleRace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers and heartbeats for several seconds")
	}
	t.Parallel()
	e := newBackendEnv(t, 2*time.Minute, false)
	e.ok("schedule", "add", "tick", "@every 1s", "--catch-up", "all", "--overlap", "queue", "--queue", "ticks", "--", "true")

	var workers []*bgCQ
	for range 3 {
		workers = append(workers, startCQ(t, e, "worker", "--concurrency", "2", "--queue", "ticks"))
	}
	ctx, stop := context.WithCancel(context.Background())
	var beats sync.WaitGroup
	var beatErrs syncBuffer
	for range 2 {
		beats.Add(1)
		go func() {
			defer beats.Done()
			for ctx.Err() == nil {
				if _, errs, code := e.run("heartbeat"); code != 0 {
					_, _ = beatErrs.Write([]byte(errs))
				}
			}
		}()
	}
	// Six seconds of slots at least, whoever takes them.
	eventually(t, time.Minute, "six slots fired", func() (bool, string) {
		n := strings.Count(e.ok("ls", "-q", "--limit", "0", "--queue", "ticks"), "\n")
		return n >= 6, strings.Repeat("x", n)
	})
	stop()
	beats.Wait()
	for _, w := range workers {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if code := w.wait(t); code != 0 {
			t.Errorf("a worker exited %d: %s", code, w.errout.String())
		}
	}
	if s := beatErrs.String(); s != "" {
		t.Errorf("cq heartbeat failed: %s", s)
	}

	var slots []string
	fired := map[string]int{}
	for _, ev := range e.events() {
		switch ev.Kind {
		case "schedule.skipped":
			t.Errorf("a slot was skipped: %s", ev.Data)
		case "schedule.fired":
			var d struct {
				Name string `json:"name"`
				Slot string `json:"slot"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.Name != "tick" || d.Slot == "" {
				t.Fatalf("schedule.fired data %s: %v", ev.Data, err)
			}
			if ev.TaskID == nil || *ev.TaskID != "tick@"+strings.TrimSuffix(d.Slot, ".000Z")+"Z" {
				t.Errorf("schedule.fired of slot %s names task %v", d.Slot, ev.TaskID)
			}
			fired[d.Slot]++
			slots = append(slots, d.Slot)
		}
	}
	for slot, n := range fired {
		if n != 1 {
			t.Errorf("slot %s fired %d times", slot, n)
		}
	}
	slices.Sort(slots)
	for i := 1; i < len(slots); i++ {
		a, _ := time.Parse(time.RFC3339, slots[i-1])
		b, _ := time.Parse(time.RFC3339, slots[i])
		if b.Sub(a) != time.Second {
			t.Errorf("slots %s then %s: want one second apart", slots[i-1], slots[i])
		}
	}
	ids := strings.Fields(e.ok("ls", "-q", "--limit", "0", "--queue", "ticks"))
	if len(ids) != len(fired) {
		t.Errorf("%d tasks for %d slots fired", len(ids), len(fired))
	}
}

// TestServeSchedules: GET /schedules answers as cq schedule ls -o json,
// GET /schedules/{name} as cq schedule show -o json, 404 (code 4) for
// none.
func TestServeSchedules(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, time.Minute, true)
	g := startGateway(t, e)
	var empty []any
	g.want(200, &empty, "GET", "/schedules", "")
	if len(empty) != 0 {
		t.Fatalf("GET /schedules with none: %v", empty)
	}
	e.ok("schedule", "add", "nightly", "@daily", "--tz", "UTC", "--", "./backup.sh")
	e.ok("schedule", "add", "tick", "@every 1h", "--overlap", "queue", "--shell", "date")
	var got, want []map[string]any
	g.want(200, &got, "GET", "/schedules", "")
	if err := json.Unmarshal([]byte(e.ok("schedule", "ls", "-o", "json")), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Errorf("GET /schedules = %v\ncq schedule ls -o json = %v", got, want)
	}
	var one, show map[string]any
	g.want(200, &one, "GET", "/schedules/tick", "")
	if err := json.Unmarshal([]byte(e.ok("schedule", "show", "tick", "-o", "json")), &show); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, show) {
		t.Errorf("GET /schedules/tick = %v, cq schedule show = %v", one, show)
	}
	g.wantErr(404, 4, "GET", "/schedules/none", "")
}
