package maintenance

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
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
	var note func([]string) error
	if opt.Home != "" {
		if err := finishPending(ctx, st, opt.Home); err != nil {
			return counts, err
		}
		pending := pendingPath(opt.Home, os.Getpid())
		defer os.Remove(pending)
		note = func(runIDs []string) error { return writePending(pending, runIDs) }
	}
	for _, state := range queue.CleanupStates {
		counts[state] = 0
		for {
			if err := ctx.Err(); err != nil {
				return counts, err
			}
			began := time.Now()
			ids, runIDs, err := st.DeleteExpiredThen(ctx, state, opt.Retention, opt.Batch, note)
			if err != nil {
				return counts, err
			}
			n := len(ids)
			if opt.Deleted != nil && n > 0 {
				opt.Deleted(state, ids)
			}
			if opt.Home != "" {
				removeRunFolders(opt.Home, runIDs)
			}
			if n > 0 {
				if err := pause(ctx, time.Since(began)); err != nil {
					return counts, err
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
	// The deleted tasks' events, slice by slice (see Store.SweepEvents;
	// windows a killed cleanup left are swept too), then the freed pages
	// back, in small steps, with the same pauses for the same reason.
	err := inSteps(ctx, func() (bool, error) {
		_, more, err := st.SweepEvents(ctx)
		return more, err
	})
	if err == nil {
		err = inSteps(ctx, func() (bool, error) {
			freed, err := st.IncrementalVacuum(ctx, VacuumStep)
			return freed > 0, err
		})
	}
	return counts, err
}

// inSteps calls step, each call one short transaction, until it reports
// nothing more to do, with a pause after each call that did something.
func inSteps(ctx context.Context, step func() (more bool, err error)) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		began := time.Now()
		more, err := step()
		if err != nil || !more {
			return err
		}
		if err := pause(ctx, time.Since(began)); err != nil {
			return err
		}
	}
}

// ClearQueue cancels every task of queue name that is not doing (cq
// queue clear), with their dependents, in steps of CleanupBatch tasks
// with a pause after each, as Cleanup does: a clear of a million tasks
// in one transaction would hold the write lock long enough for every
// worker's leases to lapse. Tasks stored after it began are left alone.
// It returns how many tasks it cancelled, dependents in other queues
// included; cancelled, if set, is told their ids after each step.
func ClearQueue(ctx context.Context, st *queue.Store, name string, cancelled func(ids []string)) (int, error) {
	bound, err := st.ClearQueueStart(ctx, name)
	if err != nil {
		return 0, err
	}
	total := 0
	for after := int64(0); ; {
		began := time.Now()
		ids, next, err := st.ClearQueueStep(ctx, name, after, bound, CleanupBatch)
		total += len(ids)
		if cancelled != nil && len(ids) > 0 {
			cancelled(ids)
		}
		if err != nil || next == 0 {
			return total, err
		}
		after = next
		// After every step, one that cancelled nothing too: it held the
		// write lock while it read its window.
		if err := pause(ctx, time.Since(began)); err != nil {
			return total, err
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

// A cleanup deletes a batch's runs in one transaction and their folders
// after its commit. So that a cleanup killed in between leaves no folder
// behind for good, each batch first notes its run ids in the home's
// cleanup-PID.pending file (inside the transaction, before anything is
// deleted); the next cleanup removes the folders of those runs that are
// no longer stored, then the file.

func pendingPath(home string, pid int) string {
	return filepath.Join(home, "cleanup-"+strconv.Itoa(pid)+".pending")
}

func writePending(path string, runIDs []string) error {
	f, err := fsutil.OpenPrivate(path, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(runIDs, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// finishPending completes what cleanups that died left undone: for every
// pending file of a process that is gone, it removes the folders of the
// listed runs the store no longer holds, then the file.
func finishPending(ctx context.Context, st *queue.Store, home string) error {
	files, _ := filepath.Glob(filepath.Join(home, "cleanup-*.pending"))
	for _, f := range files {
		pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "cleanup-"), ".pending"))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // still running (or the pid was reused): left for later
		}
		b, err := fsutil.ReadFile(f)
		if err != nil {
			continue
		}
		var ids []string
		for _, id := range strings.Fields(string(b)) {
			if queue.ValidID(id) {
				ids = append(ids, id)
			}
		}
		stored, err := st.StoredRuns(ctx, ids)
		if err != nil {
			return err
		}
		var gone []string
		for _, id := range ids {
			if !stored[id] {
				gone = append(gone, id)
			}
		}
		removeRunFolders(home, gone)
		_ = os.Remove(f)
	}
	return nil
}

func removeRunFolders(home string, runIDs []string) {
	// Through a symbolic link at runs, the folders removed would be
	// another folder's.
	if fsutil.OwnDirExists(filepath.Join(home, "runs")) != nil {
		return
	}
	for _, id := range runIDs {
		if id != "" {
			dir := filepath.Join(home, "runs", id)
			// Once more if it failed: the run's worker may have written
			// its summary.json into the folder while it was being emptied
			// (the run ended just before this cleanup deleted it), and
			// the folder was then not empty when its turn came.
			if os.RemoveAll(dir) != nil {
				_ = os.RemoveAll(dir)
			}
		}
	}
}
