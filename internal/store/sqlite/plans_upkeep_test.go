package sqlite

import (
	"strings"
	"testing"
)

// TestCleanupDeletesByID: cleanup's batch delete finds its rows by id,
// and the heartbeat's orphan scan starts from the dependency edges, even
// where the planner's statistics make tasks_state look selective (as on
// a store of a million tasks of few states): through tasks_state each
// read every task of the state.
func TestCleanupDeletesByID(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	skewedStats(t, d)
	plan := boundPlan(t, d, sqlDeleteTasks(200))
	if !strings.Contains(plan, "USING INDEX sqlite_autoindex_tasks_1 (id=?)") || strings.Contains(plan, "tasks_state") {
		t.Errorf("cleanup's delete does not find its rows by id:\n%s", plan)
	}
	// The heartbeat's orphan scan and dependency-count heal read a
	// window of the dependency edges, never every failed and cancelled
	// task, nor every edge.
	for name, q := range map[string]string{"orphan scan": sqlCancelOrphans, "count heal": sqlHealDepCounts} {
		if plan := boundPlan(t, d, q); strings.Contains(plan, "tasks_state") || !strings.Contains(plan, "SEARCH d USING PRIMARY KEY (task_id>? AND task_id<?)") {
			t.Errorf("the %s does not read a window of the dependency edges:\n%s", name, plan)
		}
	}
	// The same statements without the + are what the statistics above
	// send to tasks_state, so the checks above would catch the return of
	// a bare state: if the planner stops doing so, they prove nothing
	// any more, and the statistics or the checks must change with it.
	bareOrphans := strings.NewReplacer("+dep.state", "dep.state", "+t.state", "t.state").Replace(sqlCancelOrphans)
	if plan := boundPlan(t, d, bareOrphans); !strings.Contains(plan, "tasks_state") {
		t.Errorf("the planner no longer picks tasks_state for the orphan scan without its +, so this test no longer shows what the + prevents:\n%s", plan)
	}
	bare := boundPlan(t, d, strings.Replace(sqlDeleteTasks(200), "+state", "state", 1))
	if !strings.Contains(bare, "tasks_state") {
		t.Errorf("the planner no longer picks tasks_state for cleanup's delete without its +, so this test no longer shows what the + prevents:\n%s", bare)
	}
}

// TestEventSweepPlans: cleanup reads a task's first and last events
// through events_task_ends (its WHERE must repeat the index's), and the
// sweep reads a range of seqs and looks each task up by id.
func TestEventSweepPlans(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	ends := strings.Replace(sqlTaskEnds, "%s", "("+strings.TrimSuffix(strings.Repeat("?,", 200), ",")+")", 1)
	if plan := boundPlan(t, d, ends); !strings.Contains(plan, "USING INDEX events_task_ends (task_id=?)") {
		t.Errorf("the task ends query does not read events_task_ends:\n%s", plan)
	}
	plan := queryPlan(t, d.SQL, sqlSweepEvents, 1, 5000)
	if !strings.Contains(plan, "SEARCH events USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)") ||
		!strings.Contains(plan, "sqlite_autoindex_tasks_1 (id=?)") {
		t.Errorf("the sweep does not read a range of seqs and look tasks up by id:\n%s", plan)
	}
}

// TestStartLateReadsTheLiveIndex: the start-timeout scan, which the
// heartbeat repeats for every queue with a start timeout, reads the small
// runs_live index, never the runs table, which keeps every run until
// cleanup.
func TestStartLateReadsTheLiveIndex(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	if plan := queryPlan(t, d.SQL, sqlRunsStartLate, "q", "b", 1, "x"); !strings.Contains(plan, "USING INDEX runs_live") {
		t.Errorf("the start-timeout scan does not read runs_live:\n%s", plan)
	}
}
