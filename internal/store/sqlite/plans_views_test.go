package sqlite

import (
	"strings"
	"testing"
)

// TestViewLiveRunQueriesUseTheLiveIndex: the live-run scans of the views
// (a worker's cancel polling every 250 ms, cq workers' run counts) read
// the small runs_live index, never the runs table, which keeps every run
// until cleanup.
func TestViewLiveRunQueriesUseTheLiveIndex(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"cancelling runs": {sqlRunsCancelling, []any{"w"}},
		"runs by worker":  {sqlWorkerRuns, nil},
	} {
		if plan := queryPlan(t, d.SQL, q.sql, q.args...); !strings.Contains(plan, "USING INDEX runs_live") {
			t.Errorf("%s does not read runs_live:\n%s", name, plan)
		}
	}
}
