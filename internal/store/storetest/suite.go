package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// A contract test: t's database is its own, from b.New.
type contractTest struct {
	name string
	fn   func(t *testing.T, b Backend)
}

// tests are the contract tests, by area.
var tests = []contractTest{
	// Tasks (tasks.go, intake.go).
	{"TaskGetMissing", testTaskGetMissing},
	{"TaskDependencyStates", testTaskDependencyStates},
	{"TaskCreateInbox", testTaskCreateInbox},
	{"TaskCreateEnqueued", testTaskCreateEnqueued},
	{"TaskCreateEnqueuedBatch", testTaskCreateEnqueuedBatch},
	{"TaskUpdateFields", testTaskUpdateFields},
	{"TaskUpdateStateMismatch", testTaskUpdateStateMismatch},
	{"TaskUpdateRace", testTaskUpdateRace},
	{"TaskLaneHeads", testTaskLaneHeads},
	{"TaskLaneRace", testTaskLaneRace},
	{"TaskDependencies", testTaskDependencies},
	{"TaskKeyHolder", testTaskKeyHolder},
	{"TaskChangeSpecAndRetryReset", testTaskChangeSpecAndRetryReset},
	{"TaskIDsWithPrefix", testTaskIDsWithPrefix},
	// Events (events.go, views.go).
	{"EventOrder", testEventOrder},
	{"EventRace", testEventRace},
	{"WriteRollsBack", testWriteRollsBack},
	// Views (views.go).
	{"TaskList", testTaskList},
	{"TaskBlockedReads", testTaskBlockedReads},
	{"Snapshot", testSnapshot},
	{"QueueSettings", testQueueSettings},
	{"SystemState", testSystemState},
	{"Workers", testWorkers},
	// Upkeep (upkeep.go).
	{"TaskDelete", testTaskDelete},
	{"TaskDepsUpkeep", testTaskDepsUpkeep},
	// Runs (runs.go): claims, starts, leases, ends, completion.
	{"ClaimOrder", testClaimOrder},
	{"ClaimStartLease", testClaimStartLease},
	{"ClaimRace", testClaimRace},
	{"RunsBatched", testRunsBatched},
	{"Completion", testCompletion},
	{"RunReads", testRunReads},
	{"ProbeRuns", testProbeRuns},
	{"FixtureRunAdd", testFixtureRunAdd},
	{"RunOutput", testRunOutput},
	// Runs that talk back (interact.go).
	{"Asks", testAsks},
	{"Messages", testMessages},
	{"RunProgress", testRunProgress},
	// Recurring schedules (schedules.go).
	{"Schedules", testSchedules},
	{"ScheduleAdvanceRace", testScheduleAdvanceRace},
	// Migrations (Schema).
	{"MigrateNew", testMigrateNew},
	{"MigrateOlder", testMigrateOlder},
	{"MigrateNewerRefused", testMigrateNewerRefused},
	{"MigrateConcurrentOpen", testMigrateConcurrentOpen},
}

// Run runs every contract test against b, each as a subtest of t on a
// database of its own, in parallel.
func Run(t *testing.T, b Backend) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, b)
		})
	}
}

// env is a test's store with the helpers the tests share.
type env struct {
	t    testing.TB
	b    Backend
	addr string
	s    store.Store
}

// newEnv opens a new database of b's.
func newEnv(t testing.TB, b Backend) *env {
	t.Helper()
	addr := b.New(t)
	return &env{t: t, b: b, addr: addr, s: b.Open(t, addr)}
}

// write runs fn in a write transaction and fails the test on its error.
func (e *env) write(fn func(tx store.Tx) error) {
	e.t.Helper()
	if err := e.s.Write(ctx, fn); err != nil {
		e.t.Fatal(err)
	}
}

// errRollback makes a Write roll back; tryIn runs fn in a transaction
// that is then rolled back, to read what a write would report.
var errRollback = errors.New("roll back")

func (e *env) tryIn(fn func(tx store.Tx) error) {
	e.t.Helper()
	if err := e.s.Write(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errRollback
	}); !errors.Is(err, errRollback) {
		e.t.Fatal(err)
	}
}

func (e *env) task(id string) store.Task {
	e.t.Helper()
	t, err := e.s.TaskGet(ctx, id)
	if err != nil {
		e.t.Fatalf("TaskGet(%s): %v", id, err)
	}
	return *t
}

// events lists every event, in seq order.
func (e *env) events() []store.EventRecord {
	e.t.Helper()
	evs, err := allEvents(e.s)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func allEvents(r store.Reader) ([]store.EventRecord, error) {
	var out []store.EventRecord
	var since int64
	for {
		n := 0
		err := r.EventList(ctx, since, 1000, func(ev *store.EventRecord) {
			out = append(out, *ev)
			since = ev.Seq
			n++
		})
		if err != nil || n == 0 {
			return out, err
		}
	}
}

func (e *env) taskEvents(id string) []store.EventRecord {
	e.t.Helper()
	var out []store.EventRecord
	if err := e.s.EventListOfTask(ctx, id, func(ev *store.EventRecord) { out = append(out, *ev) }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// at is a time in the stored format, i seconds after a fixed instant.
func at(i int) string {
	return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second).Format("2006-01-02T15:04:05.000Z")
}

// spec is a task spec as the store keeps it (its content is the domain's).
func spec(id string) string { return `{"id":"` + id + `","cmd":["true"]}` }

// enqueue stores t through the gateway as the domain does: its queue is
// ensured, it is todo (TodoAt now) unless t.State says otherwise, and it
// heads its lane when it has no key or no other task holds the lane.
func enqueue(tx store.Tx, t store.Task, now string) error {
	if t.Queue == "" {
		t.Queue = "q"
	}
	if t.Spec == "" {
		t.Spec = spec(t.ID)
	}
	if t.State == "" {
		t.State, t.TodoAt = "todo", now
	}
	t.LaneHead = true
	if t.Key != "" {
		held, err := tx.TaskLaneHeld(ctx, t.Key, t.ID)
		if err != nil {
			return err
		}
		t.LaneHead = !held
	}
	if err := tx.QueueEnsure(ctx, t.Queue, now); err != nil {
		return err
	}
	return tx.TaskCreateEnqueued(ctx, t, now)
}

// finish moves a task in a lane to state to, out of its lane, and hands
// the lane on, as the domain does when a task ends.
func finish(tx store.Tx, id, from, to, now string) error {
	t, err := tx.TaskGet(ctx, id)
	if err != nil {
		return err
	}
	ok, err := tx.TaskUpdate(ctx, store.TaskUpdate{ID: id, From: from, To: to, At: now,
		Set: store.SetLaneHead | store.SetFinishedAt, FinishedAt: now})
	if err != nil || !ok {
		return fmt.Errorf("finish %s from %s: applied %v, %w", id, from, ok, err)
	}
	if err := tx.EventAdd(ctx, store.Event{At: now, Kind: "task." + to, TaskID: id, From: from, To: to}); err != nil {
		return err
	}
	if t.LaneHead && t.Key != "" {
		return tx.TaskLaneAdvance(ctx, t.Key)
	}
	return nil
}

// ids are the ids of ts, in order.
func ids(ts []*store.Task) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// sorted is a sorted copy of s, never nil.
func sorted(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}
