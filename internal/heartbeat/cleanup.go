package heartbeat

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// CleanupBatch is how many tasks one cleanup transaction deletes, and
// VacuumStep how many free pages one incremental-vacuum step returns:
// both small enough that no writer waits long for the lock.
const (
	CleanupBatch = 200
	VacuumStep   = 256
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
	// Deleted, if set, is told the ids each batch deleted.
	Deleted func(state string, ids []string)
}

// Cleanup deletes terminal tasks past retention, with their runs, events
// and run folders, batch by batch, then gives the freed pages back to the
// file system in small steps. It returns the counts per state.
func Cleanup(ctx context.Context, st *queue.Store, opt CleanupOptions) (map[string]int, error) {
	if opt.Batch <= 0 {
		opt.Batch = CleanupBatch
	}
	counts := map[string]int{}
	for _, state := range queue.CleanupStates {
		counts[state] = 0
		for {
			if err := ctx.Err(); err != nil {
				return counts, err
			}
			began := time.Now()
			ids, runIDs, err := st.DeleteExpiredIDs(ctx, state, opt.Retention, opt.Batch)
			if err != nil {
				return counts, err
			}
			n := len(ids)
			if opt.Deleted != nil && n > 0 {
				opt.Deleted(state, ids)
			}
			if n > 0 {
				if err := pause(ctx, time.Since(began)); err != nil {
					return counts, err
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
	// Freed pages go back in small steps with the same pauses, for the
	// same reason.
	for {
		began := time.Now()
		freed, err := st.IncrementalVacuum(ctx, VacuumStep)
		if err != nil || freed == 0 {
			return counts, err
		}
		if err := pause(ctx, time.Since(began)); err != nil {
			return counts, err
		}
	}
}

// pause leaves the write lock free for a while after a step that held it
// for took: a producer or worker in another process waits in SQLite's
// busy handler, which polls at up to 100 ms intervals, and would otherwise
// rarely find the lock free between back-to-back steps. Twice the step's
// time, with jitter, keeps cleanup's share of the lock at about a third.
func pause(ctx context.Context, took time.Duration) error {
	gap := max(2*took, 10*time.Millisecond)
	gap += time.Duration(rand.Int64N(int64(gap/2) + 1))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(gap):
		return nil
	}
}
