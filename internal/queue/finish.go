package queue

import (
	"context"
	"encoding/json"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Outcome is how a run ended, as its worker saw it.
type Outcome struct {
	State    string // succeeded, failed, timeout or cancelled
	ExitCode *int
	Signal   string
	Error    string
	// Class is the failure class of a failed run (ClassOther by default).
	Class string
	// At is when the process ended (zero: now). A worker records ends a
	// few milliseconds late, several to a commit; ended_at is At, kept
	// between the run's start (or creation) and the commit.
	At time.Time
}

// FinishRun records a run's end and its task's outcome in one
// transaction: succeeded → task done (dependents may become runnable);
// failed or timeout → blocked for a retry while the class budget lasts,
// else failed (dependents cancelled); a run that was being cancelled ends
// its task cancelled unless it succeeded. Every write is guarded by the
// lease token: a fenced worker gets a conflict and changes nothing.
func (s *Store) FinishRun(ctx context.Context, runID, token string, o Outcome) (taskState string, err error) {
	res, err := s.FinishRuns(ctx, []Finish{{RunID: runID, Token: token, Outcome: o}}, nil)
	if err != nil {
		return "", err
	}
	return res.Finished[0].TaskState, res.Finished[0].Err
}

// Finish is one run's end as its worker saw it. Release gives the run
// back instead (graceful stop).
type Finish struct {
	RunID, Token string
	Outcome      Outcome
	Release      bool
	// Output, when set, is kept with the run as its end is recorded
	// (where hosts share the store: see store.RunOutput).
	Output *store.RunOutput
}

// Finished is what recording one Finish did.
type Finished struct {
	TaskState string
	// Run is the run as stored now, for its summary.json.
	Run *Run
	Err error
}

// FinishResult is the outcome of FinishRuns.
type FinishResult struct {
	Finished []Finished
	Claimed  []*Claimed
	// StartErrs are Cycle's refused starts, by position (nil: started).
	StartErrs []error
}

// FinishRuns records several ends in one transaction, each on its own (a
// refused one changes nothing and does not stop the others), and then, if
// claim is set, claims up to claim.N tasks in the same transaction, so
// that a busy worker pays one commit per cycle instead of one per step.
func (s *Store) FinishRuns(ctx context.Context, fs []Finish, claim *ClaimN) (FinishResult, error) {
	return s.Cycle(ctx, nil, fs, claim)
}

// Cycle is a worker's whole step in one transaction: it records starts
// (queued → running, each on its own like StartRuns; refusals are in
// StartErrs), then ends (like FinishRuns), then claims. A busy worker
// thus pays one commit per cycle: the starts of the runs it launched
// last time ride with the ends that come next.
func (s *Store) Cycle(ctx context.Context, starts []Start, fs []Finish, claim *ClaimN) (FinishResult, error) {
	var res FinishResult
	// s.st.Write: see ClaimN.
	err := s.st.Write(ctx, func(tx store.Tx) error {
		now := s.now()
		res = FinishResult{Finished: make([]Finished, len(fs)), StartErrs: make([]error, len(starts))}
		if err := s.startAll(ctx, tx, now, starts, res.StartErrs); err != nil {
			return err
		}
		done := make([]bool, len(fs))
		if !s.perRow {
			var err error
			if done, err = finishSucceeded(ctx, tx, now, fs, res.Finished); err != nil {
				return err
			}
		}
		for i, f := range fs {
			if done[i] {
				continue
			}
			if err := tx.Savepoint("finish"); err != nil {
				return err
			}
			st, err := finishTx(ctx, tx, now, f)
			if err != nil {
				if !IsConflict(err) && !IsNotFound(err) {
					return err
				}
				if err := tx.RollbackTo("finish"); err != nil {
					return err
				}
				res.Finished[i].Err = err
			} else {
				res.Finished[i].TaskState = st
				if v, err := tx.RunViewGet(ctx, f.RunID); err == nil {
					r := runOf(v)
					res.Finished[i].Run = &r
				}
			}
			if err := tx.Release("finish"); err != nil {
				return err
			}
		}
		for i, f := range fs {
			if f.Output != nil && res.Finished[i].Err == nil && res.Finished[i].Run != nil {
				if err := tx.RunOutputSave(ctx, *f.Output); err != nil {
					return err
				}
			}
		}
		if claim != nil && claim.N > 0 {
			var err error
			res.Claimed, err = claimTx(ctx, tx, s.leaseNow(now), claim.Params, claim.N)
			return err
		}
		return nil
	})
	return res, err
}

// finishSucceeded records at once the ends of fs that are plain
// successes (not a release) of runs still running under their token: the
// runs end at once (a CAS on each) and come back as cq shows them, their
// tasks move doing → done at once (a CAS on each), then each task hands
// its lane on and tells its dependents, as finishTask does. done[i] is set
// for each end recorded here; the others are left to finishTx, which
// records them or says why not. If a task of an ended run is not doing
// (the store broke an invariant), nothing is written here and finishTx
// meets it.
func finishSucceeded(ctx context.Context, tx store.Tx, now time.Time, fs []Finish, out []Finished) ([]bool, error) {
	done := make([]bool, len(fs))
	var idx []int
	ends := make([]store.RunEnd, 0, len(fs))
	seen := make(map[string]bool, len(fs))
	for i, f := range fs {
		if f.Release || f.Outcome.State != RunSucceeded || seen[f.RunID] {
			continue
		}
		seen[f.RunID] = true
		o := f.Outcome
		// An end given for an instant before now is kept after the
		// run's creation and start, as endRun does.
		e := store.RunEnd{RunID: f.RunID, Token: f.Token, EndedAt: FormatTime(now), ExitCode: o.ExitCode, Signal: o.Signal, Error: o.Error}
		if !o.At.IsZero() && o.At.Before(now) {
			e.EndedAt, e.Clamp = FormatTime(o.At), true
		}
		idx = append(idx, i)
		ends = append(ends, e)
	}
	if len(idx) == 0 {
		return done, nil
	}
	if err := tx.Savepoint("succeeded"); err != nil {
		return nil, err
	}
	sums, err := tx.RunsSucceed(ctx, ends)
	if err != nil {
		return nil, err
	}
	runs := make(map[string]*Run, len(sums))
	for i := range sums {
		r := runOf(&sums[i])
		runs[sums[i].ID] = &r
	}
	var tasks []string
	for _, i := range idx {
		if r := runs[fs[i].RunID]; r != nil {
			tasks = append(tasks, r.TaskID)
		}
	}
	var ended map[string]store.DoneTask
	if len(tasks) > 0 {
		if ended, err = tx.TasksDone(ctx, FormatTime(now), tasks); err != nil {
			return nil, err
		}
	}
	if len(ended) != len(tasks) {
		if err := tx.RollbackTo("succeeded"); err != nil {
			return nil, err
		}
		return done, tx.Release("succeeded")
	}
	for _, i := range idx {
		r := runs[fs[i].RunID]
		if r == nil {
			continue
		}
		done[i] = true
		out[i] = Finished{TaskState: TaskDone, Run: r}
		if err := addEvent(ctx, tx, now, event{Kind: "run." + RunSucceeded, TaskID: r.TaskID, RunID: r.ID, From: RunRunning, To: RunSucceeded}); err != nil {
			return nil, err
		}
		if err := addEvent(ctx, tx, now, event{Kind: "task." + TaskDone, TaskID: r.TaskID, From: TaskDoing, To: TaskDone}); err != nil {
			return nil, err
		}
	}
	for _, t := range tasks {
		e := ended[t]
		// A doing task holds its lane: it was its head when claimed.
		if err := advanceLane(ctx, tx, e.Key); err != nil {
			return nil, err
		}
		if e.Dependents {
			if err := releaseDependents(ctx, tx, now, t); err != nil {
				return nil, err
			}
		}
	}
	return done, tx.Release("succeeded")
}

// ClaimN asks FinishRuns to claim up to N tasks after recording the ends.
type ClaimN struct {
	Params ClaimParams
	N      int
}

func finishTx(ctx context.Context, tx store.Tx, now time.Time, f Finish) (string, error) {
	r, err := getRun(ctx, tx, f.RunID)
	if err != nil {
		return "", err
	}
	if r.Token != f.Token {
		return "", fenced(f.RunID)
	}
	if f.Release {
		reason := "released"
		if r.State == RunCancelling {
			reason = ""
		}
		// How its process ended (the signal of the stop's kill, or an
		// exit code) is kept; a run released before its start has none.
		o := f.Outcome
		return endRun(ctx, tx, now, r, Outcome{State: RunCancelled, ExitCode: o.ExitCode, Signal: o.Signal, Error: o.Error, At: o.At}, reason)
	}
	return endRun(ctx, tx, now, r, f.Outcome, "")
}

// endRun moves a live run to its terminal state and decides its task.
func endRun(ctx context.Context, tx store.Tx, now time.Time, r *runRow, o Outcome, reason string) (string, error) {
	switch {
	case RunTerminal(r.State):
		return "", conflictf("run %s already ended %s", r.ID, r.State)
	case !RunTransitionAllowed(r.State, o.State),
		r.State == RunRunning && o.State == RunCancelled && reason != "released":
		return "", conflictf("run %s is %s; cannot end it %s", r.ID, r.State, o.State)
	}
	if reason == "" && r.State == RunCancelling && o.State == RunCancelled {
		// Only a user's cancel moves a run to cancelling.
		reason = "cancelled by user"
	}
	ended := FormatTime(now)
	if !o.At.IsZero() && o.At.Before(now) {
		// Fixed-width times compare as text.
		ended = max(FormatTime(o.At), r.Created, r.Started)
	}
	if err := casRunToken(ctx, tx, now, r, o.State, reason, store.RunUpdate{Set: store.SetRunEndedAt | store.SetRunExit,
		EndedAt: ended, ExitCode: o.ExitCode, Signal: o.Signal, Error: o.Error}); err != nil {
		return "", err
	}
	t, err := getTask(ctx, tx, r.TaskID)
	if err != nil {
		return "", err
	}
	if t.State != TaskDoing {
		return "", conflictf("task %s is %s, not doing", t.ID, t.State)
	}
	wasCancelling := r.State == RunCancelling
	switch {
	case o.State == RunSucceeded:
		return TaskDone, finishTask(ctx, tx, now, t, TaskDone, "")
	case o.State == RunCancelled && reason == "released":
		err := casTask(ctx, tx, now, t, TaskTodo, "", "released", store.TaskUpdate{
			Set: store.SetTodoAt | store.ClearWarned, TodoAt: FormatTime(now)})
		return TaskTodo, err
	case wasCancelling || o.State == RunCancelled:
		return TaskCancelled, cancelTask(ctx, tx, now, t, "cancelled by user")
	}
	why := describe(o)
	if r.Probe {
		// A probe's failures are expected: whatever its class, it is
		// never retried and spends no budget (docs/semantics.md,
		// Probes).
		return TaskFailed, finishTask(ctx, tx, now, t, TaskFailed, why)
	}
	// failed or timeout: spend the class budget.
	class := o.Class
	if o.State == RunTimeout && class == "" {
		class = ClassTimeout
	}
	if class == "" {
		class = ClassOther
	}
	q, err := getQueue(ctx, tx, t.Queue)
	if err != nil {
		return "", err
	}
	budget, spent, spend := 0, 0, false
	switch class {
	case ClassOther:
		var sp Spec
		_ = json.Unmarshal([]byte(t.Spec), &sp)
		budget, spent, spend = q.Retries, t.FailsOther, true
		if sp.Retries != nil {
			budget = *sp.Retries
		}
	case ClassTransient:
		budget, spent, spend = q.TransientRetries, t.FailsTransient, true
	case ClassTimeout:
		budget, spent, spend = q.TimeoutRetries, t.FailsTimeout, true
	}
	if spend && spent < budget {
		nb := now.Add(Backoff(class, spent+1, time.Duration(q.BackoffMS)*time.Millisecond))
		err := casTask(ctx, tx, now, t, TaskBlocked, "", "retry after "+why, store.TaskUpdate{
			Set:           store.SpendFail | store.SetBlockedReason | store.SetNotBefore | store.SetReason,
			FailClass:     class,
			BlockedReason: BlockedRetry, NotBefore: FormatTime(nb), NotBeforeWhy: BlockedRetry, Reason: "retry after " + why})
		return TaskBlocked, err
	}
	u := store.TaskUpdate{}
	if spend {
		u.Set, u.FailClass = store.SpendFail, class
	}
	return TaskFailed, finishTaskSet(ctx, tx, now, t, TaskFailed, why, u)
}

// describe says in a few words why a run failed, for the task's reason.
func describe(o Outcome) string {
	switch {
	case o.Error != "":
		return o.Error
	case o.Signal != "":
		return "killed by " + o.Signal
	case o.ExitCode != nil:
		return "exit code " + strconv.Itoa(*o.ExitCode)
	}
	return o.State
}

// Backoff is the delay before retry number n (1-based) of a class: the
// transient class waits 30 s, 60 s, 120 s…; a timeout 5 min; any other
// failure base·2^(n-1) with ±20 % jitter, capped at one hour.
func Backoff(class string, n int, base time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	switch class {
	case ClassTransient:
		return 30 * time.Second * time.Duration(1<<min(n-1, 10))
	case ClassTimeout:
		return 5 * time.Minute
	}
	if base <= 0 {
		base = 30 * time.Second
	}
	d := float64(base) * math.Pow(2, float64(n-1))
	d = math.Min(d, float64(time.Hour))
	d *= 0.8 + 0.4*mrand.Float64()
	return min(time.Duration(d), time.Hour)
}

// finishTask ends a doing task done or failed, hands its lane on, and
// tells its dependents.
func finishTask(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, to, reason string) error {
	return finishTaskSet(ctx, tx, now, t, to, reason, store.TaskUpdate{})
}

func finishTaskSet(ctx context.Context, tx store.Tx, now time.Time, t *taskRow, to, reason string, u store.TaskUpdate) error {
	u.Set |= store.SetLaneHead | store.SetBlockedReason | store.SetFinishedAt | store.SetReason
	u.FinishedAt, u.Reason = FormatTime(now), reason
	if err := casTask(ctx, tx, now, t, to, "", reason, u); err != nil {
		return err
	}
	if t.LaneHead {
		if err := advanceLane(ctx, tx, t.Key); err != nil {
			return err
		}
	}
	if to == TaskDone {
		return releaseDependents(ctx, tx, now, t.ID)
	}
	return cancelDependents(ctx, tx, now, t.ID, "dependency "+t.ID+" "+to)
}

// releaseDependents counts a finished dependency off its dependents and
// moves those that nothing blocks any more from blocked to todo.
func releaseDependents(ctx context.Context, tx store.Tx, now time.Time, dep string) error {
	ready, err := tx.TaskDependencyDone(ctx, dep)
	if err != nil {
		return err
	}
	for _, t := range ready {
		br := blockedReason(t.Hold, 0, t.NotBefore, t.NotBeforeWhy, now)
		if br != "" {
			if err := tx.TaskSetBlockedReason(ctx, t.ID, br); err != nil {
				return err
			}
			continue
		}
		if err := casTask(ctx, tx, now, t, TaskTodo, "", "dependencies done", todoNow(now)); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseRun gives a run back at a worker's graceful stop: the run ends
// cancelled (reason released) and its task returns to todo, spending no
// retry budget. A run a user was cancelling ends its task cancelled.
func (s *Store) ReleaseRun(ctx context.Context, runID, token string) (string, error) {
	res, err := s.FinishRuns(ctx, []Finish{{RunID: runID, Token: token, Release: true}}, nil)
	if err != nil {
		return "", err
	}
	return res.Finished[0].TaskState, res.Finished[0].Err
}
