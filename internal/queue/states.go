package queue

// Task states (docs/semantics.md, Task states).
const (
	TaskInbox     = "inbox"
	TaskTodo      = "todo"
	TaskDoing     = "doing"
	TaskBlocked   = "blocked"
	TaskDone      = "done"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// Run states (docs/semantics.md, Run states).
const (
	RunQueued     = "queued"
	RunRunning    = "running"
	RunCancelling = "cancelling"
	RunSucceeded  = "succeeded"
	RunFailed     = "failed"
	RunTimeout    = "timeout"
	RunCancelled  = "cancelled"
)

// Blocked reasons, in the order the first that holds is named.
const (
	BlockedHold       = "hold"
	BlockedDependency = "dependency"
	BlockedRetry      = "retry"
	BlockedScheduled  = "scheduled"
)

// TaskStates lists every task state, in lifecycle order.
var TaskStates = []string{TaskInbox, TaskTodo, TaskBlocked, TaskDoing, TaskDone, TaskFailed, TaskCancelled}

// RunStates lists every run state.
var RunStates = []string{RunQueued, RunRunning, RunCancelling, RunSucceeded, RunFailed, RunTimeout, RunCancelled}

// TaskTransitions is the task state machine's table (docs/semantics.md): from → allowed targets.
var TaskTransitions = map[string][]string{
	TaskInbox:     {TaskTodo, TaskBlocked, TaskCancelled},
	TaskTodo:      {TaskDoing, TaskBlocked, TaskCancelled},
	TaskDoing:     {TaskDone, TaskBlocked, TaskFailed, TaskCancelled, TaskTodo},
	TaskBlocked:   {TaskTodo, TaskCancelled},
	TaskFailed:    {TaskTodo, TaskBlocked},
	TaskCancelled: {TaskTodo, TaskBlocked},
	TaskDone:      {},
}

// RunTransitions is the run state machine's table (docs/semantics.md): from → allowed targets.
var RunTransitions = map[string][]string{
	RunQueued:     {RunRunning, RunFailed, RunCancelled, RunTimeout},
	RunRunning:    {RunSucceeded, RunFailed, RunTimeout, RunCancelling, RunCancelled},
	RunCancelling: {RunCancelled, RunSucceeded, RunFailed, RunTimeout},
}

// TaskTransitionAllowed reports whether the task state machine allows from → to.
func TaskTransitionAllowed(from, to string) bool { return contains(TaskTransitions[from], to) }

// RunTransitionAllowed reports whether the run state machine allows from → to.
func RunTransitionAllowed(from, to string) bool { return contains(RunTransitions[from], to) }

// TaskTerminal reports whether a task state is final for workers and timers.
func TaskTerminal(s string) bool { return s == TaskDone || s == TaskFailed || s == TaskCancelled }

// RunTerminal reports whether a run state never changes again.
func RunTerminal(s string) bool {
	return s == RunSucceeded || s == RunFailed || s == RunTimeout || s == RunCancelled
}

// ValidTaskState reports whether s names a task state.
func ValidTaskState(s string) bool { return contains(TaskStates, s) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
