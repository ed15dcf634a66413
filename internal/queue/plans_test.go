package queue

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store/sqlite"
)

// TestLiveRunQueriesUseTheLiveIndex: the scans a busy worker and the
// heartbeat repeat (cancel polling every 250 ms, the reaper, the
// start-timeout scan, the per-queue limit) read the small runs_live index,
// never the runs table, which keeps every run until cleanup.
func TestLiveRunQueriesUseTheLiveIndex(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"cancelling runs": {sqlCancellingRuns, []any{"w"}},
		"queued too long": {sqlQueuedTooLong, []any{"q", "b", 1, "x"}},
		"runs by worker":  {sqlWorkerRuns, nil},
	} {
		if plan := queryPlan(t, d.SQL, q.sql, q.args...); !strings.Contains(plan, "USING INDEX runs_live") {
			t.Errorf("%s does not read runs_live:\n%s", name, plan)
		}
	}
}

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

// skewedStats gives d the planner statistics of a store of two million
// tasks and runs of few states: there tasks_state and runs_live look
// selective, and a statement that may use them instead of the ids does.
func skewedStats(t *testing.T, d *sqlite.DB) {
	t.Helper()
	for _, q := range []string{
		`ANALYZE`,
		`DELETE FROM sqlite_stat1`,
		`INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES
			('tasks', 'tasks_state', '2000000 2 2'),
			('tasks', 'sqlite_autoindex_tasks_1', '2000000 1'),
			('tasks', NULL, '2000000'),
			('runs', 'runs_live', '2000000 2'),
			('runs', 'sqlite_autoindex_runs_1', '2000000 1'),
			('runs', NULL, '2000000')`,
		`ANALYZE sqlite_schema`,
	} {
		if _, err := d.SQL.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// planStore is a new store for the plan tests.
func planStore(t *testing.T) *sqlite.DB {
	t.Helper()
	d, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// boundPlan is queryPlan of q with the text "x" bound to each parameter.
func boundPlan(t *testing.T, d *sqlite.DB, q string) string {
	t.Helper()
	args := make([]any, strings.Count(q, "?"))
	for i := range args {
		args[i] = "x"
	}
	return queryPlan(t, d.SQL, q, args...)
}

// queryPlan is EXPLAIN QUERY PLAN of q with args, one detail per line.
func queryPlan(t *testing.T, d *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := d.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	return b.String()
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

// TestMergeWindows: windows come out sorted, with those that overlap or
// lie within sweepGap merged, empty ones dropped, and at most sweepMax
// that still cover every window given.
func TestMergeWindows(t *testing.T) {
	t.Parallel()
	got := mergeWindows([]seqWindow{{50000, 60000}, {5, 10}, {9, 20}, {20 + sweepGap, 30000}, {7, 3}, {90000, 90000}})
	want := []seqWindow{{5, 30000}, {50000, 60000}, {90000, 90000}}
	if !slices.Equal(got, want) {
		t.Errorf("mergeWindows = %v, want %v", got, want)
	}
	var many []seqWindow
	for i := range int64(3 * sweepMax) {
		lo := i * 10 * sweepGap
		many = append(many, seqWindow{lo, lo + 1})
	}
	got = mergeWindows(slices.Clone(many))
	if len(got) != sweepMax {
		t.Fatalf("%d windows left of %d, want %d", len(got), len(many), sweepMax)
	}
	for _, w := range many {
		i := slices.IndexFunc(got, func(g seqWindow) bool { return g[0] <= w[0] && w[1] <= g[1] })
		if i < 0 {
			t.Fatalf("window %v is not covered by %v", w, got)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i][0] <= got[i-1][1] {
			t.Fatalf("windows overlap or are out of order: %v", got)
		}
	}
}
