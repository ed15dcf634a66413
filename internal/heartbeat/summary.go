package heartbeat

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/queue"
)

// Summary is runs/<run_id>/summary.json: the run as cq show prints it,
// plus task_id and duration_seconds.
type Summary struct {
	queue.Run
	DurationSeconds *float64 `json:"duration_seconds"`
}

// WriteSummary writes the summary of an ended run into its folder under
// home (created if the run never had one), whoever ended it: its worker,
// the reaper, or a user's cancel of a run not started yet. A run that has
// not ended gets none. Errors are ignored: the store holds the same facts.
func WriteSummary(ctx context.Context, st *queue.Store, home, taskID, runID string) {
	runs, err := st.Runs(context.WithoutCancel(ctx), taskID)
	if err != nil {
		return
	}
	for _, r := range runs {
		if r.ID == runID && r.EndedAt != nil {
			SaveSummary(home, r)
			return
		}
	}
}

// SaveSummary writes summary.json for run r.
func SaveSummary(home string, r queue.Run) {
	out := Summary{Run: r}
	if r.StartedAt != nil && r.EndedAt != nil {
		d := queue.ParseStoredTime(*r.EndedAt).Sub(queue.ParseStoredTime(*r.StartedAt)).Seconds()
		out.DurationSeconds = &d
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return
	}
	dir := filepath.Join(home, "runs", r.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	f, err := fsutil.OpenPrivate(filepath.Join(dir, "summary.json"), os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return
	}
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close()
}
