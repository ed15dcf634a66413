package queue

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/db"
)

// TestLiveRunQueriesUseTheLiveIndex: the scans a busy worker and the
// heartbeat repeat (cancel polling every 250 ms, the reaper, the
// start-timeout scan, the per-queue limit) read the small runs_live index,
// never the runs table, which keeps every run until cleanup.
func TestLiveRunQueriesUseTheLiveIndex(t *testing.T) {
	t.Parallel()
	d, err := db.Open(context.Background(), filepath.Join(t.TempDir(), "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"cancelling runs": {sqlCancellingRuns, []any{"w"}},
		"queued too long": {sqlQueuedTooLong, []any{"q", "x"}},
		"expired leases":  {sqlExpiredLeases, []any{"x"}},
		"queue live":      {sqlQueueLive, []any{"q"}},
	} {
		rows, err := d.SQL.Query("EXPLAIN QUERY PLAN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(detail + "\n")
		}
		rows.Close()
		if !strings.Contains(plan.String(), "USING INDEX runs_live") {
			t.Errorf("%s does not read runs_live:\n%s", name, plan.String())
		}
	}
}
