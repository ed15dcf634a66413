package store

import "context"

// UpkeepReader and UpkeepWriter are the operations of the maintenance
// pass and of cleanup: the safety nets behind the event-driven cascade
// and promotions, wait warnings, the system_state notes, deleting old
// tasks and sweeping their events, giving free space back.
type UpkeepReader interface {
	// QueueList reads the settings of every queue, by name.
	QueueList(ctx context.Context) ([]*Queue, error)

	// RunsStartLate lists the ids of queue's runs still queued that were
	// claimed before the instant before: on the boot clock (claimed
	// before before.BootNS) when the run was claimed on boot
	// before.BootID, else by its wall-clock creation (before
	// before.Wall); at most 500 of them, in no particular order: the
	// start timeout comes back for the rest.
	RunsStartLate(ctx context.Context, queue string, before LeaseClock) ([]string, error)

	// TaskDepsWindow reads the dependency edges (one per dependent and
	// dependency) whose dependent's id is above after (all of them for
	// ""), in dependent id order, up to limit of them: it returns how
	// many it read and the dependent id of the last one ("", 0 when
	// there are none).
	TaskDepsWindow(ctx context.Context, after string, limit int) (last string, n int, err error)
	// TaskOrphans lists, among the tasks with an id in (lo, hi], those
	// still waiting (inbox, todo, blocked) on a dependency that is stored
	// and ended failed or cancelled: one row per such edge, up to 1000 of
	// them, in no set order.
	TaskOrphans(ctx context.Context, lo, hi string) ([]TaskOrphan, error)
	// TaskBlockedReady lists blocked tasks that nothing blocks any more:
	// not held, no dependency count left, and not_before unset or at or
	// before at. Up to 1000 of them, in no set order.
	TaskBlockedReady(ctx context.Context, at string) ([]*Task, error)
	// TaskWaitingUnwarned lists the ids of up to limit tasks of queue in
	// todo whose todo_at is before before and that were not warned about
	// since they entered todo (see TaskWarnedSet), in no set order.
	TaskWaitingUnwarned(ctx context.Context, queue, before string, limit int) ([]string, error)

	// TaskExpiredCount counts the tasks in state whose finished_at is set
	// and before before.
	TaskExpiredCount(ctx context.Context, state, before string) (int, error)
	// TaskExpiredEach calls fn with the id of every task TaskExpiredCount
	// counts, in id order, while it reads them (fn should not write to
	// the store); it stops at fn's first error and returns it.
	TaskExpiredEach(ctx context.Context, state, before string, fn func(id string) error) error
	// TaskExpiredList is up to limit of the tasks TaskExpiredCount
	// counts, by id, in no set order.
	TaskExpiredList(ctx context.Context, state, before string, limit int) ([]string, error)

	// RunIDsOfTasks lists the ids of every run of the tasks taskIDs, in
	// no set order; nil for none.
	RunIDsOfTasks(ctx context.Context, taskIDs []string) ([]string, error)
	// RunStored returns those of ids (any number) that are stored runs,
	// in no set order.
	RunStored(ctx context.Context, ids []string) ([]string, error)
	// RunEndedList lists up to limit runs that ended at or after after
	// and before before, after the run (after, afterID) in (ended_at, id)
	// order, in that order.
	RunEndedList(ctx context.Context, after, afterID, before string, limit int) ([]RunEnded, error)

	// FreePagesCount is how many pages of the database file are unused
	// and could be given back to the file system (0 for a backend that
	// does not keep such pages).
	FreePagesCount(ctx context.Context) (int, error)
}

// UpkeepWriter: see UpkeepReader.
type UpkeepWriter interface {
	// SystemStateSet sets one system_state value, noting at as when.
	SystemStateSet(ctx context.Context, key, value, at string) error
	// SystemStateDelete deletes one system_state key, if set.
	SystemStateDelete(ctx context.Context, key string) error

	// TaskDepCountsHeal zeroes the dependency count of each blocked task
	// with an id in (lo, hi] and dependency edges whose count is above 0
	// while none of its dependencies still stored is other than done (a
	// stale count), without a transition or an event.
	TaskDepCountsHeal(ctx context.Context, lo, hi string) error
	// TaskWarnedSet records that a task in todo was warned about waiting
	// (until it enters todo again, see ClearWarned); it reports false,
	// changing nothing, when the task is not in todo or was warned
	// already.
	TaskWarnedSet(ctx context.Context, id string) (bool, error)

	// TaskDelete deletes those of the tasks ids still in state, with
	// their runs and their own dependency edges, and returns their ids in
	// no set order. The edges of tasks that depended on them stay,
	// recording state as how the dependency ended (for
	// TaskDeadDependency). Their events stay, for EventSweep: spans holds
	// where they are, one span per deleted task that has a task.created
	// or terminal event.
	TaskDelete(ctx context.Context, state string, ids []string) (deleted []string, spans []EventSpan, err error)

	// EventSweep deletes the events with seqs from lo to hi (both
	// included) whose task is no longer stored; events of no task stay.
	// It returns how many it deleted.
	EventSweep(ctx context.Context, lo, hi int64) (int, error)

	// FreePagesRelease gives up to pages of the free pages (see
	// FreePagesCount) back to the file system.
	FreePagesRelease(ctx context.Context, pages int) error
}

// TaskOrphan is a task still waiting on a dependency Dep that ended in
// state DepState (failed or cancelled).
type TaskOrphan struct{ ID, Dep, DepState string }

// RunEnded names a run that has ended, with when.
type RunEnded struct{ TaskID, RunID, EndedAt string }

// EventSpan is where a deleted task's events lie in the log: from its
// first event (task.created, or its first terminal event if it has no
// task.created) to its last terminal event, or to the end of the log
// when End is 0 (a task with no terminal event, set so by hand).
type EventSpan struct{ First, End int64 }
