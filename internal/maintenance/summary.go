package maintenance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

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
			saveSummary(home, r, true)
			return
		}
	}
}

// SaveSummary writes summary.json for run r into its folder, as the run's
// worker does just after the commit that ended it. A folder that is not
// there is not made: cq cleanup may have deleted the run, and its folder,
// in between (with a retention near 0), and a summary would bring back a
// folder no run owns, for good. A run whose folder was never made (its
// disk was full) gets its summary from a later maintenance pass
// (WriteMissingSummaries), which reads the store first.
func SaveSummary(home string, r queue.Run) { saveSummary(home, r, false) }

// saveSummary writes summary.json for run r, making its folder first if
// create is set.
func saveSummary(home string, r queue.Run, create bool) {
	out := Summary{Run: r}
	if r.StartedAt != nil && r.EndedAt != nil {
		d := queue.ParseStoredTime(*r.EndedAt).Sub(queue.ParseStoredTime(*r.StartedAt)).Seconds()
		out.DurationSeconds = &d
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return
	}
	// The runs folder and the run's own are cq's: a symbolic link at
	// either is refused, or the summary would be written elsewhere.
	runs := filepath.Join(home, "runs")
	dir := filepath.Join(runs, r.ID)
	check := fsutil.OwnDirExists
	if create {
		check = fsutil.OwnDir
	}
	if check(runs) != nil || check(dir) != nil {
		return
	}
	f, err := fsutil.OpenPrivate(filepath.Join(dir, "summary.json"), os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return
	}
	_, werr := f.Write(append(b, '\n'))
	if err := f.Close(); werr != nil || err != nil {
		// A full disk: no summary rather than a truncated one; a later
		// heartbeat pass writes it (WriteMissingSummaries).
		_ = os.Remove(f.Name())
	}
}

// summaryCheckBatch bounds how many ended runs one pass looks at, and
// summaryGrace is how long after its end a run's own worker has to write
// its summary (it does so just after the end's commit).
const (
	summaryCheckBatch = 2000
	summaryGrace      = 10 * time.Second
)

// WriteMissingSummaries is the safety net behind the worker's own
// summary.json writes: a worker killed between a run's recorded end and
// its summary leaves none. Each pass looks at the next runs that ended
// (after a cursor kept in system_state, summaryGrace ago at the latest)
// and writes the summary of any whose folder lacks one. It returns how
// many it wrote; errors leave it for the next pass.
func WriteMissingSummaries(ctx context.Context, st *queue.Store, home string) int {
	if home == "" {
		return 0
	}
	cursor, _, err := st.SystemState(ctx, "summaries_after")
	if err != nil {
		return 0
	}
	after, afterID, _ := strings.Cut(cursor, " ")
	runs, err := st.EndedRunsAfter(ctx, after, afterID, st.Now().Add(-summaryGrace), summaryCheckBatch)
	if err != nil || len(runs) == 0 {
		return 0
	}
	n := 0
	for _, r := range runs {
		// An empty one is what a write refused by a full disk leaves.
		if fi, err := os.Lstat(filepath.Join(home, "runs", r.RunID, "summary.json")); os.IsNotExist(err) || (err == nil && fi.Size() == 0) {
			WriteSummary(ctx, st, home, r.TaskID, r.RunID)
			n++
		}
	}
	last := runs[len(runs)-1]
	_ = st.SetSystemState(ctx, map[string]string{"summaries_after": last.EndedAt + " " + last.RunID})
	return n
}
