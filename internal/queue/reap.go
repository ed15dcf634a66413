package queue

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Reaped is a run the reaper ended because its lease expired.
type Reaped struct {
	RunID, TaskID, From, To, Host string
	Pgid                          int
	// Claimed and Started are the run's claim and recorded start (zero if
	// it never started): its process group's leader started in between.
	Claimed, Started time.Time
}

// reaped describes run r, ended from state from to to.
func reaped(r *runRow, from, to string) Reaped {
	rp := Reaped{RunID: r.ID, TaskID: r.TaskID, From: from, To: to, Host: r.Host, Pgid: r.Pgid,
		Claimed: ParseStoredTime(r.Created)}
	if r.Started != "" {
		rp.Started = ParseStoredTime(r.Started)
	}
	return rp
}

// ReapExpiredThen ends runs whose lease expired (their worker is lost):
// running → failed (lease_expired, transient class), cancelling →
// cancelled, queued → failed. Each CAS checks the token and that the lease
// is still expired, so a run its worker completed or renewed meanwhile is
// never touched. It calls stop for each run it ends, inside the
// transaction, before the commit that frees the run's task (and its key's
// lane) for another run: the caller kills the lost run's processes there,
// so that they are gone before anyone may take the task again.
func (s *Store) ReapExpiredThen(ctx context.Context, stop func(Reaped)) ([]Reaped, error) {
	var out []Reaped
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		out = out[:0]
		ln := s.leaseNow(now)
		ids, err := tx.RunsLeaseExpired(ctx, ln.clock())
		if err != nil {
			return err
		}
		for _, id := range ids {
			r, err := getRun(ctx, tx, id)
			if err != nil {
				return err
			}
			if RunTerminal(r.State) || !ln.expired(r) {
				continue
			}
			r.reapAt = &ln
			o := Outcome{State: RunFailed, Class: ClassTransient, Error: "lease expired (worker lost)"}
			switch r.State {
			case RunQueued:
				// Its process may have started, and even ended: the
				// worker was lost before it could record either.
				o.Error = "lease expired before the start was recorded (worker lost)"
			case RunCancelling:
				o = Outcome{State: RunCancelled, Error: "lease expired while cancelling"}
			}
			if _, err := endRun(ctx, tx, now, r, o, "lease_expired"); err != nil {
				return err
			}
			out = append(out, reaped(r, r.State, o.State))
			if stop != nil {
				stop(out[len(out)-1])
			}
		}
		return nil
	})
	return out, err
}

// LiveRun is a run not yet ended and the worker that holds it.
type LiveRun struct {
	Reaped // From is its state; To is empty
	Worker string
}

// LiveRunsOn lists the runs not yet ended that workers of host hold.
func (s *Store) LiveRunsOn(ctx context.Context, host string) ([]LiveRun, error) {
	runs, err := s.st.RunsLiveOnHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var out []LiveRun
	for i := range runs {
		r := runRow{Run: runs[i].Run}
		out = append(out, LiveRun{Reaped: reaped(&r, r.State, ""), Worker: runs[i].Worker})
	}
	return out, nil
}
