package queue

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
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
		"queued too long": {sqlQueuedTooLong, []any{"q", "b", 1, "x"}},
	} {
		if plan := queryPlan(t, d.SQL, q.sql, q.args...); !strings.Contains(plan, "USING INDEX runs_live") {
			t.Errorf("%s does not read runs_live:\n%s", name, plan)
		}
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
	return storetest.OpenSQLite(t, "")
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
