package store

import "context"

// TaskFilter selects tasks for the listings (cq ls, cq wait): a task is
// selected when every condition given holds. A backend may rely on every
// stored task's queue having a queue row: the domain ensures one
// (QueueEnsure) whenever it stores a task or moves one to a queue.
type TaskFilter struct {
	States []string // in one of these states; none: any state
	Queue  string   // of this queue; "": any
	Key    string   // of this key; "": any key, or none
	Limit  int      // only the newest Limit; 0: all
}

// RunView is a run as commands show it.
type RunView struct {
	ID, TaskID, State string
	Attempt           int
	ExitCode          *int // nil: none recorded
	Signal, Worker    string
	StartedAt         string
	EndedAt           string
	Error, Reason     string
	CreatedAt         string
}

// EventRecord is an event as stored, with its seq.
type EventRecord struct {
	Seq int64
	Event
}

// QueueCounts is a queue's settings with its live counts.
type QueueCounts struct {
	Queue
	Backlog int // its tasks in todo
	Running int // its live runs (queued, running or cancelling)
}

// QueueFields says which settings a QueueUpdate writes.
type QueueFields uint16

// The settings a QueueUpdate may write.
const (
	SetQueueConcurrency       QueueFields = 1 << iota // Concurrency
	SetQueueRetries                                   // Retries
	SetQueueBackoff                                   // BackoffMS
	SetQueueTransientRetries                          // TransientRetries
	SetQueueTimeoutRetries                            // TimeoutRetries
	SetQueueTimeout                                   // TimeoutMS
	SetQueueStartTimeout                              // StartTimeoutMS
	SetQueueWarnAfter                                 // WarnAfterMS
	SetQueuePaused                                    // Paused
	SetQueueTimeoutCountsAsks                         // TimeoutCountsAsks
)

// QueueUpdate sets some settings of queue Name; the fields Set names
// hold their new values.
type QueueUpdate struct {
	Name string
	At   string // updated_at, when anything changes
	Set  QueueFields

	Concurrency      int
	Retries          int
	BackoffMS        int64
	TransientRetries int
	TimeoutRetries   int
	TimeoutMS        int64
	StartTimeoutMS   int64
	WarnAfterMS      int64
	Paused           bool
	// TimeoutCountsAsks: see Queue.
	TimeoutCountsAsks bool
}

// TaskClearScan is one window of tasks a queue clear reads. Tasks are
// taken in their position order (the order they were stored in, see
// TaskLastPos).
type TaskClearScan struct {
	Queue       string
	After, Upto int64  // positions after After, up to Upto
	CreatedBy   string // created at or before this time
	Limit       int
}

// Worker is a workers row as cq workers lists it.
type Worker struct {
	ID, Host    string
	PID         int
	Queues      string // its queues, a JSON array; [] for every queue
	Concurrency int
	StartedAt   string
	LastSeen    string
}

// WorkerSeen is what a worker writes of itself at each tick: its row and
// a lease of LeaseMS from At.
type WorkerSeen struct {
	ID, Host    string
	PID         int
	Queues      string // a JSON array
	Concurrency int
	LeaseMS     int64
	At          string // last seen; its start too when its row is new
	// The lease's expiry: on the wall clock, and on boot BootID's clock
	// (BootID "" when there is none; LeaseUntilNS is then unused).
	LeaseExpires string
	BootID       string
	LeaseUntilNS int64
}

// ViewReader and ViewWriter are the operations for what commands read and
// operators set: listing and showing tasks and runs, events, health
// figures, queue settings and workers.
type ViewReader interface {
	// Snapshot runs fn with a Reader whose reads all see one state of
	// the store, whatever commits meanwhile, and returns fn's error. In a
	// transaction, fn reads that transaction. fn must not keep the
	// Reader after it returns.
	Snapshot(ctx context.Context, fn func(Reader) error) error

	// TaskList calls fn with each task f selects, the newest (the last
	// stored) first; fn's error stops it and is returned. fn may call
	// other reads of the store meanwhile.
	TaskList(ctx context.Context, f TaskFilter, fn func(*Task) error) error
	// TaskListIDs is TaskList of the tasks' ids alone.
	TaskListIDs(ctx context.Context, f TaskFilter, fn func(id string) error) error
	// TaskCount is how many tasks f selects, its limit aside.
	TaskCount(ctx context.Context, f TaskFilter) (int, error)
	// TaskDependencies calls fn with each dependency of the tasks ids,
	// by task id, each task's in the order its dependencies were given.
	// It may call fn for other tasks' dependencies as well (a backend may
	// read them all rather than look up many ids): callers skip those.
	TaskDependencies(ctx context.Context, ids []string, fn func(taskID, depID string)) error
	// TaskStates calls fn with the state and reason ("" for none) of
	// each task of ids that exists, in no particular order.
	TaskStates(ctx context.Context, ids []string, fn func(id, state, reason string)) error
	// TaskDue lists blocked tasks whose not_before has come (at or
	// before at) and that nothing else blocks (no hold, no dependency
	// left): at most 1000, in no particular order.
	TaskDue(ctx context.Context, at string) ([]*Task, error)
	// TaskRunnableExists reports whether a todo task heads its lane (a
	// task of no key heads its own): one a worker could claim, its queue
	// and limits aside.
	TaskRunnableExists(ctx context.Context) (bool, error)
	// TaskNextDue is the earliest not_before of a blocked task; "" when
	// none waits for a time.
	TaskNextDue(ctx context.Context) (string, error)
	// TaskStateCounts calls fn with each state that has tasks and how
	// many.
	TaskStateCounts(ctx context.Context, fn func(state string, n int)) error
	// TaskRetryBlockedCount is how many tasks are blocked waiting for a
	// retry (blocked_reason "retry").
	TaskRetryBlockedCount(ctx context.Context) (int, error)
	// TaskOldestTodo is the todo task that has waited longest (the
	// earliest todo_at), its queue and its todo_at; id "" when none.
	TaskOldestTodo(ctx context.Context) (id, queue, since string, err error)
	// TaskWaitWarnedCount is how many todo tasks were warned of as
	// waiting longer than their queue's warn-after.
	TaskWaitWarnedCount(ctx context.Context) (int, error)
	// TaskLastPos is the position of the task stored last, 0 when there
	// is none. Positions grow in the order tasks are stored; one freed by
	// a deletion may be taken again by a new task.
	TaskLastPos(ctx context.Context) (int64, error)
	// TaskClearable lists, in position order, up to s.Limit tasks of
	// queue s.Queue in inbox, todo or blocked, created at or before
	// s.CreatedBy, whose positions are after s.After and up to s.Upto;
	// last is the position of the last one listed (0 when none).
	TaskClearable(ctx context.Context, s TaskClearScan) (ids []string, last int64, err error)

	// RunViewGet reads one run; ErrNotFound when there is none.
	RunViewGet(ctx context.Context, id string) (*RunView, error)
	// RunViewList lists a task's runs by attempt, oldest first; none:
	// an empty list.
	RunViewList(ctx context.Context, taskID string) ([]RunView, error)
	// RunCancellingIDs lists the runs of worker that a user asked to
	// cancel (state cancelling).
	RunCancellingIDs(ctx context.Context, worker string) ([]string, error)
	// RunEndedCounts calls fn with each state of the runs that ended at
	// or after since, and how many; probe runs (Run.Probe) are left out.
	RunEndedCounts(ctx context.Context, since string, fn func(state string, n int)) error
	// RunEndedAvgSeconds is the mean time, in seconds, from start to end
	// of the runs that ended at or after since, those that never started
	// and probe runs aside; ok is false when there are none.
	RunEndedAvgSeconds(ctx context.Context, since string) (avg float64, ok bool, err error)

	// EventList calls fn with up to limit events of seq above since, in
	// seq order. fn must not keep e.
	EventList(ctx context.Context, since int64, limit int, fn func(e *EventRecord)) error
	// EventListOfTask calls fn with every event of one task, in seq
	// order. fn must not keep e.
	EventListOfTask(ctx context.Context, taskID string, fn func(e *EventRecord)) error
	// EventLastSeq is the seq of the newest event (in a transaction, its
	// own included), 0 when there is none.
	EventLastSeq(ctx context.Context) (int64, error)

	// QueueListWithCounts lists every queue, by name, with its backlog
	// and running counts; none: an empty list.
	QueueListWithCounts(ctx context.Context) ([]QueueCounts, error)
	// QueueExists reports whether a queue has a row.
	QueueExists(ctx context.Context, name string) (bool, error)
	// QueueTimeouts calls fn with each queue's run time limit in
	// milliseconds (0: none).
	QueueTimeouts(ctx context.Context, fn func(queue string, timeoutMS int64)) error

	// WorkerListLive lists the workers whose lease has not passed at at,
	// by start time then id; none: an empty list. A lease taken on boot
	// at.BootID's clock is judged on it, one of another boot has passed,
	// and one with no boot id, or any lease when at has none, is judged
	// by its wall-clock expiry.
	WorkerListLive(ctx context.Context, at LeaseClock) ([]Worker, error)
	// WorkerAnyLive reports whether a worker's lease has not passed at
	// at (judged as in WorkerListLive).
	WorkerAnyLive(ctx context.Context, at LeaseClock) (bool, error)
	// WorkerRunCounts calls fn with each worker holding live runs
	// (queued, running or cancelling) and how many.
	WorkerRunCounts(ctx context.Context, fn func(worker string, n int)) error

	// SystemStateGet reads one system_state value; ok is false when it
	// was never set.
	// In a transaction, a backend with concurrent writers holds the key
	// until commit: a read followed by a write of it cannot lose another
	// transaction's write.
	SystemStateGet(ctx context.Context, key string) (value string, ok bool, err error)
}

// ViewWriter: see ViewReader.
type ViewWriter interface {
	// QueueUpdate writes the settings u.Set names, and updated_at = u.At,
	// to queue u.Name only when one of them differs from what is stored;
	// it reports whether it did (false too when there is no such queue).
	QueueUpdate(ctx context.Context, u QueueUpdate) (bool, error)
	// EventCancelledTasks lists the tasks of the task.cancelled events
	// of seq above seq, this transaction's included, in seq order.
	EventCancelledTasks(ctx context.Context, seq int64) ([]string, error)
	// WorkerSave writes w's row when it is missing, and otherwise
	// refreshes it (all but its start time).
	WorkerSave(ctx context.Context, w WorkerSeen) error
	// WorkerDelete deletes worker id's row, if any.
	WorkerDelete(ctx context.Context, id string) error
	// WorkerSweep deletes the rows of workers whose lease passed, by the
	// wall clock, before before, and returns how many.
	WorkerSweep(ctx context.Context, before string) (int, error)
}
