package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyQueriesUseTheirIndexes: the lane and --unique checks read the
// partial indexes whose conditions they repeat (migration 5 rewrote
// those conditions), never the tasks table.
func TestKeyQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	for name, q := range map[string]struct {
		sql, index string
	}{
		"lane held":    {sqlLaneHeld, "USING INDEX tasks_lane (key=?)"},
		"advance lane": {sqlAdvanceLane, "USING INDEX tasks_lane (key=?)"},
		"key holder":   {sqlKeyHolder, "USING INDEX tasks_key_live (key=?)"},
	} {
		if plan := boundPlan(t, d, q.sql); !strings.Contains(plan, q.index) {
			t.Errorf("%s does not read %s:\n%s", name, q.index, plan)
		}
	}
}

// TestCastBindingsKeepThePlan: the statements that bind CAST(? AS TEXT)
// (see sqlAdvanceLane) have the plan they had with a bare ?.
func TestCastBindingsKeepThePlan(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	plan := func(q string) string { t.Helper(); return boundPlan(t, d, q) }
	for name, q := range map[string]string{
		"lane held":          sqlLaneHeld,
		"advance lane":       sqlAdvanceLane,
		"dead dependency":    sqlDeadDependency,
		"waiting dependents": sqlWaitingDependents,
		"ready dependents":   sqlReadyDependents,
	} {
		if !strings.Contains(q, "CAST(? AS TEXT)") {
			t.Errorf("%s does not bind CAST(? AS TEXT)", name)
		}
		got, bare := plan(q), plan(strings.ReplaceAll(q, "CAST(? AS TEXT)", "?"))
		if got != bare {
			t.Errorf("%s: plan\n%swith a bare ?:\n%s", name, got, bare)
		}
	}
}

// skewedStats gives d the planner statistics of a store of two million
// tasks and runs of few states: there tasks_state and runs_live look
// selective, and a statement that may use them instead of the ids does.
func skewedStats(t *testing.T, d *DB) {
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
func planStore(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), filepath.Join(t.TempDir(), "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// boundPlan is queryPlan of q with the text "x" bound to each parameter.
func boundPlan(t *testing.T, d *DB, q string) string {
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
