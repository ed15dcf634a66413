package store

import "context"

// Task is a tasks row as stored.
type Task struct {
	ID             string
	State          string
	Queue          string
	Key            string
	Priority       int
	Seq            int64
	LaneHead       bool
	Spec           string // the task's spec, JSON
	Unique         bool
	Hold           bool
	DepsLeft       int
	NotBefore      string
	NotBeforeWhy   string
	BlockedReason  string
	Reason         string
	Attempts       int
	FailsOther     int
	FailsTransient int
	FailsTimeout   int
	TodoAt         string
	CreatedAt      string
	UpdatedAt      string
	FinishedAt     string
}

// TaskFields says which fields of a TaskUpdate it writes.
type TaskFields uint16

// The fields a TaskUpdate may write besides state and updated_at.
const (
	SetSeq           TaskFields = 1 << iota // Seq
	SetLaneHead                             // LaneHead
	SetHold                                 // Hold
	SetBlockedReason                        // BlockedReason
	SetNotBefore                            // NotBefore and NotBeforeWhy
	SetTodoAt                               // TodoAt
	SetFinishedAt                           // FinishedAt
	SetReason                               // Reason
	ClearWarned                             // the long-running warning, so it may be given again
	ResetFails                              // every failure count to 0
	SpendFail                               // one more failure of class FailClass (never with ResetFails)
	taskFieldsEnd
)

// TaskFieldsAll is every field bit: a backend may size a table of
// statements by it.
const TaskFieldsAll = taskFieldsEnd - 1

// TaskUpdate is a compare-and-set of one task: it applies only while the
// task is in state From, moves it to To (To = From changes fields only)
// and writes updated_at = At and the fields Set names.
type TaskUpdate struct {
	ID, From, To string
	At           string
	Set          TaskFields

	Seq           int64
	LaneHead      bool
	Hold          bool
	BlockedReason string
	NotBefore     string
	NotBeforeWhy  string
	TodoAt        string
	FinishedAt    string
	Reason        string
	FailClass     string // "other", "transient" or "timeout", with SpendFail
}

// KeyHolder is a live task holding a key.
type KeyHolder struct{ ID, State string }

// TaskReader reads tasks.
type TaskReader interface {
	// TaskGet reads one task; ErrNotFound when there is none.
	TaskGet(ctx context.Context, id string) (*Task, error)
	// TaskLaneHeld reports whether a task other than exceptID holds a
	// place in key's lane (todo, blocked or doing).
	TaskLaneHeld(ctx context.Context, key, exceptID string) (bool, error)
	// TaskKeyHolder finds a live task (inbox, todo, blocked, doing) of key
	// other than exceptID, for --unique; nil when there is none.
	TaskKeyHolder(ctx context.Context, key, exceptID string) (*KeyHolder, error)
	// TaskDeadDependency returns the first dependency of id, in the
	// order given, that ended failed or cancelled (still stored, or
	// deleted since by cleanup) and the state it ended in; "" when none.
	TaskDeadDependency(ctx context.Context, id string) (dep, state string, err error)
	// TaskDependentsWaiting lists the tasks waiting on dep that have not
	// started (inbox, todo, blocked).
	TaskDependentsWaiting(ctx context.Context, dep string) ([]*Task, error)
}

// TaskWriter changes tasks.
type TaskWriter interface {
	// TaskUpdate applies u if the task is still in state u.From and
	// reports whether it did.
	TaskUpdate(ctx context.Context, u TaskUpdate) (bool, error)
	// TaskDependencyDone counts dep, which ended done, off the tasks
	// waiting on it (those in inbox or blocked, whose count is above 0)
	// and returns its blocked dependents left waiting on no dependency
	// (count 0), whatever else blocks them.
	TaskDependencyDone(ctx context.Context, dep string) ([]*Task, error)
	// TaskSetBlockedReason names what blocks a blocked task now, without
	// a transition or an event.
	TaskSetBlockedReason(ctx context.Context, id, reason string) error
	// TaskSeqNext is a place for a task entering its lane now: above the
	// place of every task that entered a lane in a transaction committed
	// before this call, and above every place given earlier in this
	// transaction. Called after TaskLaneHeld of the task's key, it orders
	// the key's lane as the backend orders that key's writers. (SQLite:
	// the seq the next event gets.)
	TaskSeqNext(ctx context.Context) (int64, error)
	// TaskLaneAdvance makes the first task of key's lane, in seq order,
	// its head if it is not already.
	TaskLaneAdvance(ctx context.Context, key string) error
}
