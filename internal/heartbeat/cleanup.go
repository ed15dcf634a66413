package heartbeat

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

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
		opt.Batch = 200
	}
	counts := map[string]int{}
	for _, state := range queue.CleanupStates {
		counts[state] = 0
		for {
			if err := ctx.Err(); err != nil {
				return counts, err
			}
			began := time.Now()
			n, runIDs, err := st.DeleteExpired(ctx, state, opt.Retention, opt.Batch)
			if err != nil {
				return counts, err
			}
			// Leave the write lock free for a while after each batch: a
			// producer or worker in another process waits in SQLite's busy
			// handler, which polls at up to 100 ms intervals, and would
			// otherwise rarely find the lock free between back-to-back
			// batches. Twice the batch's time, with jitter, keeps cleanup's
			// share of the lock at about a third.
			gap := max(2*time.Since(began), 10*time.Millisecond)
			gap += time.Duration(rand.Int64N(int64(gap/2) + 1))
			if n > 0 {
				select {
				case <-ctx.Done():
					return counts, ctx.Err()
				case <-time.After(gap):
				}
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
