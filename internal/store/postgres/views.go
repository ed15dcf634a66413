package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) Snapshot(ctx context.Context, fn func(store.Reader) error) error {
	return errNotYet
}

func (r *reads) TaskList(ctx context.Context, f store.TaskFilter, fn func(*store.Task) error) error {
	return errNotYet
}

func (r *reads) TaskListIDs(ctx context.Context, f store.TaskFilter, fn func(id string) error) error {
	return errNotYet
}

func (r *reads) TaskCount(ctx context.Context, f store.TaskFilter) (int, error) {
	return 0, errNotYet
}

func (r *reads) TaskDependencies(ctx context.Context, ids []string, fn func(taskID, depID string)) error {
	return errNotYet
}

func (r *reads) TaskStates(ctx context.Context, ids []string, fn func(id, state, reason string)) error {
	return errNotYet
}

func (r *reads) TaskDue(ctx context.Context, at string) ([]*store.Task, error) {
	return nil, errNotYet
}

func (r *reads) TaskRunnableExists(ctx context.Context) (bool, error) {
	return false, errNotYet
}

func (r *reads) TaskNextDue(ctx context.Context) (string, error) {
	return "", errNotYet
}

func (r *reads) TaskStateCounts(ctx context.Context, fn func(state string, n int)) error {
	return errNotYet
}

func (r *reads) TaskRetryBlockedCount(ctx context.Context) (int, error) {
	return 0, errNotYet
}

func (r *reads) TaskOldestTodo(ctx context.Context) (id, queue, since string, err error) {
	return "", "", "", errNotYet
}

func (r *reads) TaskWaitWarnedCount(ctx context.Context) (int, error) {
	return 0, errNotYet
}

func (r *reads) TaskLastPos(ctx context.Context) (int64, error) {
	return 0, errNotYet
}

func (r *reads) TaskClearable(ctx context.Context, s store.TaskClearScan) (ids []string, last int64, err error) {
	return nil, 0, errNotYet
}

func (r *reads) RunViewGet(ctx context.Context, id string) (*store.RunView, error) {
	return nil, errNotYet
}

func (r *reads) RunViewList(ctx context.Context, taskID string) ([]store.RunView, error) {
	return nil, errNotYet
}

func (r *reads) RunCancellingIDs(ctx context.Context, worker string) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) RunEndedCounts(ctx context.Context, since string, fn func(state string, n int)) error {
	return errNotYet
}

func (r *reads) RunEndedAvgSeconds(ctx context.Context, since string) (avg float64, ok bool, err error) {
	return 0, false, errNotYet
}

func (r *reads) EventList(ctx context.Context, since int64, limit int, fn func(e *store.EventRecord)) error {
	return errNotYet
}

func (r *reads) EventListOfTask(ctx context.Context, taskID string, fn func(e *store.EventRecord)) error {
	return errNotYet
}

func (r *reads) QueueListWithCounts(ctx context.Context) ([]store.QueueCounts, error) {
	return nil, errNotYet
}

func (r *reads) QueueExists(ctx context.Context, name string) (bool, error) {
	return false, errNotYet
}

func (r *reads) QueueTimeouts(ctx context.Context, fn func(queue string, timeoutMS int64)) error {
	return errNotYet
}

func (r *reads) WorkerListLive(ctx context.Context, at store.LeaseClock) ([]store.Worker, error) {
	return nil, errNotYet
}

func (r *reads) WorkerAnyLive(ctx context.Context, at store.LeaseClock) (bool, error) {
	return false, errNotYet
}

func (r *reads) WorkerRunCounts(ctx context.Context, fn func(worker string, n int)) error {
	return errNotYet
}

func (r *reads) SystemStateGet(ctx context.Context, key string) (value string, ok bool, err error) {
	return "", false, errNotYet
}

func (tx *Tx) QueueUpdate(ctx context.Context, u store.QueueUpdate) (bool, error) {
	return false, errNotYet
}

func (tx *Tx) WorkerSave(ctx context.Context, w store.WorkerSeen) error {
	return errNotYet
}

func (tx *Tx) WorkerDelete(ctx context.Context, id string) error {
	return errNotYet
}

func (tx *Tx) WorkerSweep(ctx context.Context, before string) (int, error) {
	return 0, errNotYet
}
