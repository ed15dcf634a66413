package sqlite

import (
	"strings"
	"testing"
)

// TestRunsLiveQueriesUseTheLiveIndex: the scans a busy worker and the
// heartbeat repeat (the reaper, the per-queue limit, the runs of a host)
// read the small runs_live index, never the runs table, which keeps every
// run until cleanup.
func TestRunsLiveQueriesUseTheLiveIndex(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"expired leases": {sqlExpiredLeases, []any{"b", "x", "b", 1}},
		"queue live":     {sqlQueueLive, []any{"q"}},
		"live on host":   {sqlLiveRunsOnHost, []any{"h"}},
	} {
		if plan := queryPlan(t, d.SQL, q.sql, q.args...); !strings.Contains(plan, "USING INDEX runs_live") {
			t.Errorf("%s does not read runs_live:\n%s", name, plan)
		}
	}
}

// TestRunsClaimHeadPlan: the claim's read binds CAST(? AS TEXT) (see
// sqlAdvanceLane) and has the plan it had with a bare ?, reading the
// tasks_claim index without sorting.
func TestRunsClaimHeadPlan(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	plan := func(q string) string { t.Helper(); return boundPlan(t, d, q) }
	q := sqlClaimHeads + "1"
	if !strings.Contains(q, "CAST(? AS TEXT)") {
		t.Errorf("claim head does not bind CAST(? AS TEXT)")
	}
	got, bare := plan(q), plan(strings.ReplaceAll(q, "CAST(? AS TEXT)", "?"))
	if got != bare {
		t.Errorf("claim head: plan\n%swith a bare ?:\n%s", got, bare)
	}
	if p := plan(sqlClaimHeads + "4"); !strings.Contains(p, "USING INDEX tasks_claim (queue=?)") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("claim head does not read tasks_claim in order:\n%s", p)
	}
}

// TestRunsBatchedWritesFindRowsByID: the batched claim, start and end
// statements find each row by its id, even where the planner's
// statistics make tasks_state look selective (a store of a million tasks
// of few states), never by scanning a table or a state's index.
func TestRunsBatchedWritesFindRowsByID(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	skewedStats(t, d)
	for name, c := range map[string]struct {
		sql, want string
	}{
		"claim tasks": {claimTasksSQL.get(3), "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
		"start runs":  {startRunsSQL.get(3), "SEARCH runs USING INDEX sqlite_autoindex_runs_1 (id=?)"},
		"end runs":    {endRunsSQL.get(3), "SEARCH runs USING INDEX sqlite_autoindex_runs_1 (id=?)"},
		"done tasks":  {doneTasksSQL.get(3), "SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)"},
	} {
		plan := boundPlan(t, d, c.sql)
		if !strings.Contains(plan, c.want) || strings.Contains(plan, "SCAN tasks") || strings.Contains(plan, "SCAN runs") ||
			strings.Contains(plan, "tasks_state") || strings.Contains(plan, "runs_live") {
			t.Errorf("%s does not find its rows by id:\n%s", name, plan)
		}
	}
}
