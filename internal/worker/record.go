package worker

import (
	"context"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
)

// record writes the pending starts, runs' ends and claims of up to claimN
// tasks in one commit, retrying while the store is unreachable and the
// leases hold; it logs each start and end, writes summary.json files, and
// returns the claims. A refused start's group is killed (see started).
func (w *Worker) record(ctx context.Context, ends []ending, claimN int) []*queue.Claimed {
	fs := make([]queue.Finish, len(ends))
	for i, e := range ends {
		fs[i] = e.f
	}
	pending := w.pending
	w.pending = nil
	starts := make([]queue.Start, len(pending))
	for i, r := range pending {
		starts[i] = queue.Start{RunID: r.c.RunID, Token: r.c.Token, Pid: r.pgid, Pgid: r.pgid, At: r.started}
	}
	// The oldest lease at stake bounds the retries.
	var oldest *run
	if len(pending) > 0 {
		oldest = pending[0]
	} else if len(ends) > 0 {
		oldest = ends[0].r
	}
	var claim *queue.ClaimN
	if claimN > 0 {
		claim = &queue.ClaimN{Params: w.claimParams(), N: claimN}
	}
	ctx = context.WithoutCancel(ctx)
	var res queue.FinishResult
	var err error
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		res, err = w.st.Cycle(ctx, starts, fs, claim)
		// Give up once the leases would be void: the runs will be reaped
		// and run again elsewhere.
		if err == nil || oldest == nil || time.Since(oldest.renewedAt()) >= 2*w.opt.Lease/3 {
			break
		}
		w.log.Error("store.error", "op", "finish", "error", err.Error(), "retry_in", delay.String())
		time.Sleep(delay)
	}
	if err != nil {
		w.log.Error("store.error", "op", "finish", "error", err.Error())
		res.StartErrs = make([]error, len(pending))
		for i := range res.StartErrs {
			res.StartErrs[i] = err
		}
		w.started(pending, res.StartErrs)
		return nil
	}
	w.started(pending, res.StartErrs)
	for i, e := range ends {
		f := res.Finished[i]
		log := w.log.With("task", e.r.c.TaskID, "run", e.r.c.RunID)
		if f.Err != nil {
			log.Warn("run.finish_refused", "error", f.Err.Error())
			continue
		}
		if e.f.Release {
			log.Info("run.released", "task_state", f.TaskState)
		} else {
			o := e.f.Outcome
			attrs := []any{"state", o.State, "task_state", f.TaskState}
			if o.ExitCode != nil {
				attrs = append(attrs, "exit_code", *o.ExitCode)
			}
			if o.Signal != "" {
				attrs = append(attrs, "signal", o.Signal)
			}
			if !e.r.started.IsZero() {
				attrs = append(attrs, "duration_seconds", time.Since(e.r.started).Seconds())
			}
			if e.r.c.Spec.Probe {
				// A probe's failure is expected: at Info, like any end.
				attrs = append(attrs, "probe", true)
			}
			log.Info("run.finished", attrs...)
		}
		if f.Run != nil {
			w.saveSummary(*f.Run)
		}
	}
	return res.Claimed
}

// started logs the recorded starts; a run whose start the store refused
// (cancelled or taken over since the claim) is not ours to run: its group
// is killed and its end will write nothing.
func (w *Worker) started(runs []*run, errs []error) {
	for i, r := range runs {
		if errs[i] != nil {
			w.log.Warn("run.start_refused", "task", r.c.TaskID, "run", r.c.RunID, "error", errs[i].Error())
			r.markLost()
			signalGroup(r.pgid, syscall.SIGKILL)
			// Cancelled before its start was recorded: whoever ended it
			// had no folder to write its summary into, perhaps.
			if w.opt.Home != "" {
				maintenance.WriteSummary(context.Background(), w.st, w.opt.Home, r.c.TaskID, r.c.RunID)
			}
			continue
		}
		w.log.Info("run.started", "task", r.c.TaskID, "run", r.c.RunID, "attempt", r.c.Attempt, "pid", r.pgid, "queue", r.c.Queue)
	}
}

// startDelay is how long a start may wait for a transaction to ride
// with before it is recorded on its own.
const startDelay = 3 * time.Millisecond

// flushStarts records the pending starts on their own.
func (w *Worker) flushStarts(ctx context.Context) {
	w.startArmed = false
	if len(w.pending) > 0 {
		w.record(ctx, nil, 0)
	}
}
