package store

import "context"

// IntakeReader and IntakeWriter are the operations for creating,
// enqueuing and editing tasks: enqueue, batches, dependencies, hold,
// release, retry, cancel, the spool drain.
//
// Task ids are ASCII made of letters, digits and . _ : - (queue.ValidID),
// all below '~': a backend may rely on it for prefix ranges.
type IntakeReader interface {
	// TaskExists reports whether a task of exactly this id is stored.
	TaskExists(ctx context.Context, id string) (bool, error)
	// TaskIDsWithPrefix lists the ids of stored tasks that begin with
	// prefix and are longer than it (an id equal to prefix is not
	// listed), in id order (bytewise), at most limit of them; none is an
	// empty list.
	TaskIDsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error)
	// TaskState reads a task's state; ErrNotFound when there is no such
	// task.
	TaskState(ctx context.Context, id string) (string, error)
	// TaskSpec reads a task's stored spec (JSON text, as written) and its
	// state; ErrNotFound when there is no such task.
	TaskSpec(ctx context.Context, id string) (spec, state string, err error)
	// TaskDependencyStates reads the states of deps, in their order, ""
	// for one not stored. In a transaction, a backend with concurrent
	// writers reads each under the lock that ending it takes (see
	// TaskDependencyDone and TaskDependentsWaiting): a dependency ending
	// at the same time is either read ended here, or counts the new
	// dependent off (or cancels it) after this transaction commits.
	TaskDependencyStates(ctx context.Context, deps []string) ([]string, error)
	// TaskDepsNotDone counts the dependencies of id (its --after) that are
	// stored and not done; one deleted since (by cleanup) is not counted.
	// 0 for a task without dependencies or no such task.
	TaskDepsNotDone(ctx context.Context, id string) (int, error)
	// TaskDepsOf lists the ids id waits on (its --after), stored or
	// deleted since, in any order; none for a task without dependencies.
	TaskDepsOf(ctx context.Context, id string) ([]string, error)
	// TaskDependentsCancelled lists the stored tasks that wait on dep and
	// are cancelled with reason exactly reasonA or reasonB, ordered by
	// seq, then id; none is an empty list.
	TaskDependentsCancelled(ctx context.Context, dep, reasonA, reasonB string) ([]string, error)
	// RunLiveOfTask finds the run of taskID that is live (queued,
	// running or cancelling), the one of the highest attempt if several
	// are, and its state; "", "" when it has none.
	RunLiveOfTask(ctx context.Context, taskID string) (id, state string, err error)
}

// IntakeWriter: see IntakeReader.
type IntakeWriter interface {
	// TaskCreateInbox stores a new task in state inbox from t's ID,
	// Queue, Key, Priority, Spec, Unique, Hold, DepsLeft, NotBefore and
	// NotBeforeWhy, with created_at and updated_at at; its other fields
	// are not read (the task has no seq and is no lane's head). It writes
	// no event and no dependency (TaskDepsAdd). A stored task of that id
	// is an error (the caller checks first).
	TaskCreateInbox(ctx context.Context, t Task, at string) error
	// TaskCreateEnqueued stores a new task that passes the gateway step
	// as it is created, and the two events recording that path: first
	// task.created (from none to inbox), then "task." + t.State (from
	// inbox to t.State), both at at with no run, reason or data, after
	// every event added before in the transaction. The task is stored
	// in state t.State with a new seq (as TaskSeqNext gives), created_at and
	// updated_at at, and t's Queue, Key, Priority, LaneHead, Spec,
	// Unique, Hold, DepsLeft, NotBefore, NotBeforeWhy, BlockedReason and
	// TodoAt; its other fields are not read. No dependency is written
	// (TaskDepsAdd). A stored task of that id is an error, as for
	// TaskCreateInbox.
	TaskCreateEnqueued(ctx context.Context, t Task, at string) error
	// TaskCreateEnqueuedBatch is TaskCreateEnqueued for each of ts in
	// order, at one time at, for tasks that have no key, no dependency
	// and no --unique: each is stored as the head of its (keyless) lane
	// (LaneHead, Key, Unique and DepsLeft are not read). The rows and
	// events are those of one TaskCreateEnqueued per task in that order;
	// a backend writes them with few statements.
	TaskCreateEnqueuedBatch(ctx context.Context, ts []*Task, at string) error
	// TaskDepsAdd records that id waits on deps, in their order (the
	// order TaskDeadDependency reports in). It changes no count
	// (deps_left is the creator's).
	TaskDepsAdd(ctx context.Context, id string, deps []string) error
	// TaskChangeSpec applies c if the task is still in state c.From and
	// reports whether it did.
	TaskChangeSpec(ctx context.Context, c TaskSpecChange) (bool, error)
	// TaskRetryReset prepares a task that cq retry brings back, if it is
	// still in state from: deps_left = depsLeft, no not_before (nor its
	// why), every failure count 0. It changes neither state nor
	// updated_at (the transition that follows does) and reports nothing
	// when the task is in another state.
	TaskRetryReset(ctx context.Context, id, from string, depsLeft int) error
	// RunCancelStep applies c if the run is still in state c.From and
	// reports whether it did.
	RunCancelStep(ctx context.Context, c RunCancel) (bool, error)
}

// TaskSpecChange is a compare-and-set of a task's spec: while the task is
// in state From it gets Spec (JSON) and the columns derived from it,
// Queue and Priority, and updated_at = At; its state stays.
type TaskSpecChange struct {
	ID, From    string
	Spec, Queue string
	Priority    int
	At          string
}

// RunCancel is a step of a user's cancel of a run: while the run is in
// state From it moves to To, its reason becomes Reason unless that is ""
// (then it keeps its own), and EndedAt, unless "", is its end time.
type RunCancel struct {
	ID, From, To string
	Reason       string
	EndedAt      string
}
