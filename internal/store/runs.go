package store

import "context"

// Run is a runs row as a worker or the reaper needs it.
type Run struct {
	ID, TaskID, State, Queue, Token, Host, LeaseExpires string
	Created, Started                                    string // started "" until running
	Attempt, Pgid                                       int
	// BootID and LeaseUntil are the lease on the boot clock ("" and 0
	// for a run judged on the wall clock).
	BootID     string
	LeaseUntil int64
	// Probe: the run is of a probe task (its claim's ClaimRun.Probe),
	// whose failures are never retried.
	Probe bool
}

// A run is live while it is queued, running or cancelling; it ends
// succeeded, failed, timeout or cancelled.
//
// Leases. A live run holds a lease: a wall-clock expiry (Run.LeaseExpires)
// and, when its claim or last renewal read the host's boot clock, the boot
// id and the expiry on that boot's clock (Run.BootID, Run.LeaseUntil). The
// domain reads the clocks (LeaseClock) and computes the values stored
// (Lease); a backend compares them, by these rules, at a LeaseClock c:
//   - a run without a boot id, or any run when c.BootID is "", is judged
//     on the wall clock: its lease has expired when its wall expiry is
//     before c.Wall, and is valid when it is after c.Wall;
//   - otherwise its lease has expired when its boot id is not c.BootID
//     (the host rebooted) or its boot expiry is below c.BootNS, and is
//     valid when its boot id is c.BootID and its boot expiry is above
//     c.BootNS.
//
// At the exact instant of its expiry a lease is neither expired nor valid.

// LeaseClock is an instant at which leases are judged: the wall time and
// the host's boot clock (BootID "": none, every lease is judged on the
// wall clock).
type LeaseClock struct {
	Wall   string
	BootID string
	BootNS int64 // time since boot, in nanoseconds
}

// Lease is what a claim or a renewal stores for a lease: its wall-clock
// expiry and, when BootID is not "", its expiry on that boot's clock
// (UntilNS, nanoseconds since boot).
type Lease struct {
	Expires string
	BootID  string
	UntilNS int64
}

// ClaimQueue is a queue a claim may take from, with its live runs.
type ClaimQueue struct {
	Queue
	// Live counts the queue's live runs; it is counted only for a queue
	// with a concurrency limit (Concurrency > 0), and is 0 otherwise.
	Live int
}

// ClaimHead is a runnable task as a claim reads it.
type ClaimHead struct {
	Queue    string // the queue ClaimHeads read
	ID       string
	Priority int
	Seq      int64
	Attempts int
	Spec     string
}

// ClaimRun is one task a claim takes and the run it creates for it.
type ClaimRun struct {
	TaskID, RunID, Token, Queue string
	Attempt                     int
	// Probe marks the run as a probe task's (runs.probe): the domain
	// never retries its failures, and RunEndedCounts and
	// RunEndedAvgSeconds leave it out.
	Probe bool
}

// Claim is the tasks one worker claims at one instant.
type Claim struct {
	At     string // the runs' creation, the tasks' updated_at
	Worker string // "" for none
	Host   string // "" for none
	Lease  Lease
	// ClaimedNS is the boot clock's reading at the claim, kept with
	// Lease.BootID (unused when that is "").
	ClaimedNS int64
	Runs      []ClaimRun
}

// RunStart is the start of a run's process.
type RunStart struct {
	RunID, Token string
	// At is when the process started; the run's start is stored no
	// earlier than its creation.
	At        string
	Pid, Pgid int
	// TaskID is set by RunsStart, for a start it applied, to the run's
	// task.
	TaskID string
}

// RunFields says which fields of a RunUpdate it writes.
type RunFields uint8

// The fields a RunUpdate may write besides state and reason.
const (
	SetRunEndedAt RunFields = 1 << iota // EndedAt
	SetRunExit                          // ExitCode, Signal and Error: how the process ended
	runFieldsEnd
)

// RunFieldsAll is every field bit: a backend may size a table of
// statements by it.
const RunFieldsAll = runFieldsEnd - 1

// RunUpdate is a compare-and-set of one run: it applies only while the
// run is in state From, holds the lease token Token (any token when Token
// is ""), and, when ExpiredAt is set, its lease has expired at that
// instant (the reaper's guard). It moves the run to To (To = From changes
// fields only), sets its reason to Reason (keeps it when Reason is "") and
// writes the fields Set names.
type RunUpdate struct {
	ID, From, To string
	Token        string
	Reason       string
	ExpiredAt    *LeaseClock
	Set          RunFields

	EndedAt  string
	ExitCode *int // nil for none
	Signal   string
	Error    string
}

// RunEnd is the success of a running run, as a batch records it.
type RunEnd struct {
	RunID, Token string
	EndedAt      string
	// Clamp keeps the end no earlier than the run's creation and start.
	Clamp    bool
	ExitCode *int // nil for none
	Signal   string
	Error    string
}

// DoneTask is a task TasksDone moved to done.
type DoneTask struct {
	Key        string // "" for none
	Dependents bool   // some task depends on it
}

// LiveRun is a live run and the worker that holds it.
type LiveRun struct {
	Run
	Worker string // "" for none
}

// TaskHint is a task as shell completion offers it.
type TaskHint struct {
	ID, State, Queue string
	Spec             string // the task's spec, JSON
}

// RunOutput is the end of a run's output, kept with the run where hosts
// share the store, so that cq logs on another host can print it.
type RunOutput struct {
	RunID string
	// Host is the host whose run folder has the whole output.
	Host string
	// Stdout and Stderr are the last bytes of each (at most 64 KiB);
	// StdoutSize and StderrSize the whole output's sizes.
	Stdout, Stderr         []byte
	StdoutSize, StderrSize int64
}

// RunReader and RunWriter are the operations for claims, starts, leases,
// cancels and ends of runs, and the reads of shell completion.
type RunReader interface {
	// RunGet reads one run; ErrNotFound when there is none.
	RunGet(ctx context.Context, id string) (*Run, error)
	// RunState reads one run's state; ErrNotFound when there is none.
	RunState(ctx context.Context, id string) (string, error)
	// RunsLiveOnHost lists the live runs whose host is host, in no
	// particular order.
	RunsLiveOnHost(ctx context.Context, host string) ([]LiveRun, error)
	// RunsLeaseExpired lists the ids of live runs whose lease has expired
	// at now (see Lease), at most 500 of them, in no particular order:
	// the reaper comes back for the rest.
	RunsLeaseExpired(ctx context.Context, now LeaseClock) ([]string, error)

	// ClaimQueues lists the queues a claim may take from: those not
	// paused among names (every queue when names is empty; a name with
	// no queue row is left out), in no particular order, each with its
	// live runs counted when it has a concurrency limit.
	ClaimQueues(ctx context.Context, names []string) ([]ClaimQueue, error)
	// ClaimHeads appends to out up to limit of queue's runnable tasks,
	// in the order a claim takes them: todo and the head of its key's
	// lane (lane_head; an unkeyed task is its own lane's head), by
	// priority, then seq. A limit of 0 or less appends nothing.
	ClaimHeads(ctx context.Context, queue string, limit int, out []ClaimHead) ([]ClaimHead, error)

	// RunOutputGet reads the output kept with run id (RunOutputSave);
	// ErrNotFound when none was kept.
	RunOutputGet(ctx context.Context, id string) (*RunOutput, error)

	// CompletionTasks reads up to limit tasks whose id starts with
	// prefix ("" for any), for shell completion: the tasks not yet
	// terminal (inbox, todo, blocked, doing) first, then the terminal
	// ones (done, failed, cancelled), each group newest first
	// (latest stored first). Each of its reads stops after a bounded
	// number of rows: a prefix matching fewer than narrow tasks may be
	// read whole and sorted, a wider one must not.
	CompletionTasks(ctx context.Context, prefix string, limit, narrow int) ([]TaskHint, error)
	// CompletionQueues lists the names of every queue, in order.
	CompletionQueues(ctx context.Context) ([]string, error)
}

// RunWriter: see RunReader.
type RunWriter interface {
	// ClaimTasks takes c's tasks: each moves todo → doing (attempts
	// + 1, todo_at cleared, updated_at c.At) and gets its run, queued,
	// attempt and queue as given, worker and host c's, the lease c.Lease
	// (ClaimedNS with it), created c.At. Every task must be todo: when
	// one is not, it returns an error, having maybe moved others, and
	// the transaction must not commit.
	ClaimTasks(ctx context.Context, c Claim) error

	// RunStart moves run s.RunID queued → running if it holds lease
	// token s.Token, storing its start (s.At, no earlier than the run's
	// creation), pid and pgid, and returns its task's id; "" when it
	// did not apply, having changed nothing.
	RunStart(ctx context.Context, s RunStart) (taskID string, err error)
	// RunsStart is RunStart of each of starts, at once: it sets the
	// TaskID of each start it applied, and leaves the others' "" (every
	// TaskID is "" when given). A run given twice starts once, at its
	// first start.
	RunsStart(ctx context.Context, starts []RunStart) error

	// RunUpdate applies u if the run still matches it (see RunUpdate) and
	// reports whether it did.
	RunUpdate(ctx context.Context, u RunUpdate) (bool, error)
	// RunsSucceed ends succeeded each run of ends that is running under
	// its token: ended at EndedAt (clamped as RunEnd says), exit code,
	// signal and error as given, its reason kept. It returns the runs it
	// ended, as cq shows them now, in no particular order; a run given
	// twice ends once.
	RunsSucceed(ctx context.Context, ends []RunEnd) ([]RunView, error)
	// TasksDone moves each task of ids that is doing to done, as the
	// success of its run ends it: no longer its lane's head, no blocked
	// reason nor reason, finished and updated at. It returns those it
	// moved, by id.
	TasksDone(ctx context.Context, at string, ids []string) (map[string]DoneTask, error)

	// RunOutputSave keeps o with its run, replacing what was kept; it
	// goes when the run does (cleanup).
	RunOutputSave(ctx context.Context, o RunOutput) error

	// RunLeaseRenew stores lease l for run id if it is live, holds
	// lease token token and its lease is valid at now (see Lease), and
	// returns its state; "" when it did not apply, having changed
	// nothing.
	RunLeaseRenew(ctx context.Context, id, token string, l Lease, now LeaseClock) (state string, err error)
}
