package sqlite

import (
	"strings"
	"testing"
)

// TestRunLiveOfTaskFindsByTask: a user's cancel finds a doing task's live
// run among that task's runs, even where the planner's statistics make
// runs_live look selective (a store of millions of runs), never by
// reading every live run or every run kept.
func TestRunLiveOfTaskFindsByTask(t *testing.T) {
	t.Parallel()
	d := planStore(t)
	skewedStats(t, d)
	if plan := boundPlan(t, d, sqlRunLiveOfTask); !strings.Contains(plan, "(task_id=?)") || strings.Contains(plan, "runs_live") {
		t.Errorf("the live run of a task is not found by its task:\n%s", plan)
	}
}
