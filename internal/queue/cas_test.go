package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// casEnv is a store over a fresh database whose clock only moves when a
// test moves it.
type casEnv struct {
	t   *testing.T
	ctx context.Context
	st  *Store
	now time.Time
}

func casSetup(t *testing.T) *casEnv {
	t.Helper()
	d := storetest.OpenSQLite(t, "")
	e := &casEnv{t: t, ctx: context.Background(), st: New(d.Store()), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	e.st.Now = func() time.Time { return e.now }
	e.st.Boot = clock.Following(e.st.Now)
	return e
}

// task creates a task (enqueued or left in inbox) and returns its id.
func (e *casEnv) task(enqueue bool) string {
	e.t.Helper()
	sp, err := Spec{Cmd: []string{"true"}, Cwd: "/"}.Normalize()
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.st.Create(e.ctx, []Spec{sp}, CreateOptions{Enqueue: enqueue})
	if err != nil {
		e.t.Fatal(err)
	}
	return res[0].ID
}

// claim enqueues a task and claims it: the task is doing, its run queued.
func (e *casEnv) claim() *Claimed {
	e.t.Helper()
	id := e.task(true)
	c, err := e.st.Claim(e.ctx, ClaimParams{Worker: "w", Host: "h", Lease: 90 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	if c == nil || c.TaskID != id {
		e.t.Fatalf("claim = %+v, want task %s", c, id)
	}
	return c
}

func (e *casEnv) taskRow(id string) *taskRow {
	e.t.Helper()
	t, err := getTask(e.ctx, e.st.st, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

func (e *casEnv) runRow(id string) *runRow {
	e.t.Helper()
	r, err := getRun(e.ctx, e.st.st, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *casEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := sqlite.DBOf(e.st.Backend()).SQL.ExecContext(e.ctx, q, args...); err != nil {
		e.t.Fatal(err)
	}
}

// snapshot renders the tasks, the runs and the event log.
func (e *casEnv) snapshot() string {
	e.t.Helper()
	var sb strings.Builder
	for _, q := range []string{`SELECT * FROM tasks ORDER BY id`, `SELECT * FROM runs ORDER BY id`, `SELECT * FROM events ORDER BY seq`} {
		WriteRows(e.t, &sb, sqlite.DBOf(e.st.Backend()).SQL, q)
	}
	return sb.String()
}

// lostCAS runs cas in a write transaction that commits whatever cas
// returns, so that a CAS that wrongly won would be kept, and checks that
// cas reported a conflict whose message holds want and that the store is
// as it was.
func (e *casEnv) lostCAS(want string, cas func(tx store.Tx, now time.Time) error) {
	e.t.Helper()
	before := e.snapshot()
	var casErr error
	err := e.st.write(e.ctx, func(tx store.Tx, now time.Time) error {
		casErr = cas(tx, now)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if !IsConflict(casErr) || !strings.Contains(casErr.Error(), want) {
		e.t.Errorf("CAS with a stale row = %v; want a conflict saying %q", casErr, want)
	}
	if after := e.snapshot(); after != before {
		e.t.Errorf("a lost CAS changed the store:\nbefore:\n%safter:\n%s", before, after)
	}
}

// TestLostCASChangesNothing hands each compare-and-set helper a row read
// before the row changed behind its back: the helper reports a conflict
// and changes no row and writes no event.
func TestLostCASChangesNothing(t *testing.T) {
	t.Parallel()

	t.Run("casTask: the task was held since it was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		id := e.task(true)
		stale := e.taskRow(id) // todo
		if _, _, err := e.st.Hold(e.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		e.lostCAS("is blocked, not todo", func(tx store.Tx, now time.Time) error {
			return casTask(e.ctx, tx, now, stale, TaskCancelled, "", "stale", store.TaskUpdate{Set: store.SetReason, Reason: "stale"})
		})
	})

	t.Run("casSame: the task was enqueued since it was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		id := e.task(false)
		stale := e.taskRow(id) // inbox
		if _, _, err := e.st.Enqueue(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		e.lostCAS("changed state meanwhile", func(tx store.Tx, now time.Time) error {
			return casSame(e.ctx, tx, now, stale, "task.held", "stale", store.TaskUpdate{Set: store.SetHold, Hold: true})
		})
	})

	t.Run("casRun: the run was started since it was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		c := e.claim()
		if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err != nil {
			t.Fatal(err)
		}
		// The caller read the run queued, and asks queued → cancelled.
		e.lostCAS("is running, not queued", func(tx store.Tx, now time.Time) error {
			return casRun(e.ctx, tx, now, c.RunID, c.TaskID, RunQueued, RunCancelled, "stale", FormatTime(now))
		})
	})

	t.Run("casRunToken: the run was started since it was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		c := e.claim()
		stale := e.runRow(c.RunID) // queued
		if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err != nil {
			t.Fatal(err)
		}
		e.lostCAS("is running, not queued", func(tx store.Tx, now time.Time) error {
			return casRunToken(e.ctx, tx, now, stale, RunFailed, "stale", store.RunUpdate{Set: store.SetRunEndedAt, EndedAt: FormatTime(now)})
		})
	})

	t.Run("casRunToken: the lease was taken over since the run was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		c := e.claim()
		stale := e.runRow(c.RunID) // queued, under c.Token
		// No operation hands a live run a new token; a takeover would.
		e.exec(`UPDATE runs SET lease_token = 'taken-over' WHERE id = ?`, c.RunID)
		e.lostCAS("lease lost", func(tx store.Tx, now time.Time) error {
			return casRunToken(e.ctx, tx, now, stale, RunFailed, "stale", store.RunUpdate{Set: store.SetRunEndedAt, EndedAt: FormatTime(now)})
		})
	})

	t.Run("casRunToken for the reaper: the lease was renewed since the run was read", func(t *testing.T) {
		t.Parallel()
		e := casSetup(t)
		c := e.claim()
		if err := e.st.StartRun(e.ctx, c.RunID, c.Token, 1, 1); err != nil {
			t.Fatal(err)
		}
		e.now = e.now.Add(91 * time.Second)
		stale := e.runRow(c.RunID) // running, its lease expired
		ln := e.st.leaseNow(e.now)
		stale.reapAt = &ln
		// Renewed in time by a clock the reaper's read did not see.
		l := ln.grant(time.Minute)
		e.exec(`UPDATE runs SET lease_expires_at = ?, lease_until_ns = ? WHERE id = ?`, l.Expires, l.UntilNS, c.RunID)
		e.lostCAS("lease was renewed meanwhile", func(tx store.Tx, now time.Time) error {
			return casRunToken(e.ctx, tx, now, stale, RunFailed, "lease_expired", store.RunUpdate{Set: store.SetRunEndedAt, EndedAt: FormatTime(now)})
		})
	})
}
