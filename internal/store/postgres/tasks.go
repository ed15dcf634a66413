package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) TaskGet(ctx context.Context, id string) (*store.Task, error) {
	return nil, errNotYet
}

func (r *reads) TaskLaneHeld(ctx context.Context, key, exceptID string) (bool, error) {
	return false, errNotYet
}

func (r *reads) TaskKeyHolder(ctx context.Context, key, exceptID string) (*store.KeyHolder, error) {
	return nil, errNotYet
}

func (r *reads) TaskDeadDependency(ctx context.Context, id string) (dep, state string, err error) {
	return "", "", errNotYet
}

func (r *reads) TaskDependentsWaiting(ctx context.Context, dep string) ([]*store.Task, error) {
	return nil, errNotYet
}

func (tx *Tx) TaskUpdate(ctx context.Context, u store.TaskUpdate) (bool, error) {
	return false, errNotYet
}

func (tx *Tx) TaskDependencyDone(ctx context.Context, dep string) ([]*store.Task, error) {
	return nil, errNotYet
}

func (tx *Tx) TaskSetBlockedReason(ctx context.Context, id, reason string) error {
	return errNotYet
}


func (tx *Tx) TaskLaneAdvance(ctx context.Context, key string) error {
	return errNotYet
}
