package queue

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// StartRun records that the run's process has started: queued → running.
// A lost CAS (cancelled or reaped meanwhile, or another token) means the
// worker must kill the process group it just started.
func (s *Store) StartRun(ctx context.Context, runID, token string, pid, pgid int) error {
	errs, err := s.StartRuns(ctx, []Start{{RunID: runID, Token: token, Pid: pid, Pgid: pgid}})
	if err != nil {
		return err
	}
	return errs[0]
}

// Start is one run whose process has started.
type Start struct {
	RunID, Token string
	Pid, Pgid    int
	// At is when the process started (zero: now). A worker records starts
	// a few milliseconds late, with the ends that follow them; started_at
	// is At, kept between the run's creation and the commit.
	At time.Time
}

// runStart is st as the store records it at now.
func (st Start) runStart(now time.Time) store.RunStart {
	at := now
	if !st.At.IsZero() && st.At.Before(now) {
		at = st.At
	}
	return store.RunStart{RunID: st.RunID, Token: st.Token, At: FormatTime(at), Pid: st.Pid, Pgid: st.Pgid}
}

// StartRuns records several starts in one transaction; errs[i] is the
// outcome of starts[i] (a conflict: kill that run's group).
func (s *Store) StartRuns(ctx context.Context, starts []Start) ([]error, error) {
	errs := make([]error, len(starts))
	// s.st.Write: see ClaimN.
	err := s.st.Write(ctx, func(tx store.Tx) error { return s.startAll(ctx, tx, s.now(), starts, errs) })
	return errs, err
}

// startAll records starts: every run that is still queued under its
// token moves to running at once (a CAS on each), and each start that did
// not go through startTx, which finds it refused again and says why in
// errs. A refusal is not an error of the transaction.
func (s *Store) startAll(ctx context.Context, tx store.Tx, now time.Time, starts []Start, errs []error) error {
	if len(starts) == 0 {
		return nil
	}
	if s.perRow {
		for i, st := range starts {
			errs[i] = startTx(ctx, tx, now, st)
			if errs[i] != nil && !IsConflict(errs[i]) && !IsNotFound(errs[i]) {
				return errs[i]
			}
		}
		return nil
	}
	rs := make([]store.RunStart, len(starts))
	for i, st := range starts {
		rs[i] = st.runStart(now)
	}
	if err := tx.RunsStart(ctx, rs); err != nil {
		return err
	}
	for i, st := range starts {
		// A run given twice starts once, at its first start; the second
		// is refused.
		if rs[i].TaskID == "" {
			errs[i] = startTx(ctx, tx, now, st)
			if errs[i] != nil && !IsConflict(errs[i]) && !IsNotFound(errs[i]) {
				return errs[i]
			}
			continue
		}
		if err := addEvent(ctx, tx, now, event{Kind: "run." + RunRunning, TaskID: rs[i].TaskID, RunID: st.RunID, From: RunQueued, To: RunRunning}); err != nil {
			return err
		}
	}
	return nil
}

// startTx is one queued → running CAS; it writes nothing if it fails.
func startTx(ctx context.Context, tx store.Tx, now time.Time, st Start) error {
	// The CAS first; the run is read only to say why it was refused.
	taskID, err := tx.RunStart(ctx, st.runStart(now))
	if err != nil {
		return err
	}
	if taskID == "" {
		r, err := getRun(ctx, tx, st.RunID)
		switch {
		case err != nil:
			return err
		case r.Token != st.Token:
			return fenced(st.RunID)
		default:
			return conflictf("run %s is %s, not queued", st.RunID, r.State)
		}
	}
	return addEvent(ctx, tx, now, event{Kind: "run." + RunRunning, TaskID: taskID, RunID: st.RunID, From: RunQueued, To: RunRunning})
}
