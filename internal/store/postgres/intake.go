package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) TaskExists(ctx context.Context, id string) (bool, error) {
	return false, errNotYet
}

func (r *reads) TaskIDsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) TaskState(ctx context.Context, id string) (string, error) {
	return "", errNotYet
}

func (r *reads) TaskSpec(ctx context.Context, id string) (spec, state string, err error) {
	return "", "", errNotYet
}

func (r *reads) TaskDepsNotDone(ctx context.Context, id string) (int, error) {
	return 0, errNotYet
}

func (r *reads) TaskDepsOf(ctx context.Context, id string) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) TaskDependentsCancelled(ctx context.Context, dep, reasonA, reasonB string) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) RunLiveOfTask(ctx context.Context, taskID string) (id, state string, err error) {
	return "", "", errNotYet
}

func (tx *Tx) TaskCreateInbox(ctx context.Context, t store.Task, at string) error {
	return errNotYet
}

func (tx *Tx) TaskCreateEnqueued(ctx context.Context, t store.Task, at string) error {
	return errNotYet
}

func (tx *Tx) TaskCreateEnqueuedBatch(ctx context.Context, ts []*store.Task, at string) error {
	return errNotYet
}

func (tx *Tx) TaskDepsAdd(ctx context.Context, id string, deps []string) error {
	return errNotYet
}

func (tx *Tx) TaskChangeSpec(ctx context.Context, c store.TaskSpecChange) (bool, error) {
	return false, errNotYet
}

func (tx *Tx) TaskRetryReset(ctx context.Context, id, from string, depsLeft int) error {
	return errNotYet
}

func (tx *Tx) RunCancelStep(ctx context.Context, c store.RunCancel) (bool, error) {
	return false, errNotYet
}
