package queue

import (
	"context"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// A run is one attempt at a task. Its life, a file each: a worker claims
// the task (claim.go), records its process's start (start.go), keeps its
// lease (lease.go) and records its end (finish.go); the reaper ends the
// runs of lost workers (reap.go).

// Failure classes decide which retry budget a failed run spends
// (docs/semantics.md, Retries and backoff).
const (
	ClassOther     = "other"     // non-zero exit, killed by a signal
	ClassTransient = "transient" // exit 75, spawn error, lost worker, start timeout
	ClassTimeout   = "timeout"   // the run exceeded its time limit
	ClassNone      = "none"      // never retried: missing handler
)

// ExitTempFail is EX_TEMPFAIL: a command exiting with it failed transiently.
const ExitTempFail = 75

// runRow is a runs row as a worker or the reaper needs it.
type runRow struct {
	store.Run
	// reapAt, set by the reaper, adds "and the lease expired at this
	// instant" to the CAS.
	reapAt *leaseNow
}

func getRun(ctx context.Context, q store.Reader, id string) (*runRow, error) {
	r, err := q.RunGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no run %q", id)
	}
	if err != nil {
		return nil, err
	}
	return &runRow{Run: *r}, nil
}

// RunState returns a run's current state (a worker polls it to notice a
// cancel).
func (s *Store) RunState(ctx context.Context, runID string) (string, error) {
	st, err := s.st.RunState(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return "", notFoundf("no run %q", runID)
	}
	return st, err
}

// fenced is the error a worker gets for a write its lease no longer
// covers (the token does not match, or the lease expired): it must write
// nothing more for the run.
func fenced(runID string) error {
	return conflictf("run %s: lease lost (it expired, or the run was ended or taken over); nothing written", runID)
}

// casRunToken moves run r from the state it was read in to another,
// writing the fields u sets (its ID, From, To, Token, Reason and the
// reaper's guard are filled in here), guarded by the run's lease token,
// and records the event. A lost CAS says why: another token, another
// state, or (for the reaper) a lease renewed meanwhile.
func casRunToken(ctx context.Context, tx store.Tx, now time.Time, r *runRow, to, reason string, u store.RunUpdate) error {
	u.ID, u.From, u.To, u.Token, u.Reason = r.ID, r.State, to, r.Token, reason
	if r.reapAt != nil {
		c := r.reapAt.clock()
		u.ExpiredAt = &c
	}
	ok, err := tx.RunUpdate(ctx, u)
	if err != nil {
		return err
	}
	if !ok {
		cur, err := getRun(ctx, tx, r.ID)
		if err != nil {
			return err
		}
		if cur.Token != r.Token {
			return fenced(r.ID)
		}
		if cur.State == r.State && r.reapAt != nil {
			// Same state and token: only the expiry guard refused it.
			return conflictf("run %s: its lease was renewed meanwhile; not reaped", r.ID)
		}
		return conflictf("run %s is %s, not %s", r.ID, cur.State, r.State)
	}
	return addEvent(ctx, tx, now, event{Kind: "run." + to, TaskID: r.TaskID, RunID: r.ID, From: r.State, To: to, Reason: reason})
}
