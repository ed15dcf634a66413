package heartbeat

import (
	"context"
	"os"
	"path/filepath"

	"github.com/cq-dev/cq/internal/queue"
)

// CleanupOptions configure a cleanup.
type CleanupOptions struct {
	Retention queue.Retention
	// Home holds the runs/ folders to remove with their runs.
	Home string
	// Batch is how many tasks one transaction deletes; small enough that
	// no worker or producer waits long for the write lock.
	Batch int
	// Progress, if set, is told the running counts after each batch.
	Progress func(map[string]int)
}

// Cleanup deletes terminal tasks past retention, with their runs, events
// and run folders, batch by batch, then gives the freed pages back to the
// file system in small steps. It returns the counts per state.
func Cleanup(ctx context.Context, st *queue.Store, opt CleanupOptions) (map[string]int, error) {
	if opt.Batch <= 0 {
		opt.Batch = 500
	}
	counts := map[string]int{}
	for _, state := range queue.CleanupStates {
		counts[state] = 0
		for {
			if err := ctx.Err(); err != nil {
				return counts, err
			}
			n, runIDs, err := st.DeleteExpired(ctx, state, opt.Retention, opt.Batch)
			if err != nil {
				return counts, err
			}
			for _, id := range runIDs {
				if opt.Home != "" && id != "" {
					_ = os.RemoveAll(filepath.Join(opt.Home, "runs", id))
				}
			}
			counts[state] += n
			if opt.Progress != nil && n > 0 {
				opt.Progress(counts)
			}
			if n == 0 {
				break
			}
		}
	}
	for {
		freed, err := st.IncrementalVacuum(ctx, 2000)
		if err != nil || freed == 0 {
			return counts, err
		}
	}
}
