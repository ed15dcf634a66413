package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) RunGet(ctx context.Context, id string) (*store.Run, error) {
	return nil, errNotYet
}

func (r *reads) RunState(ctx context.Context, id string) (string, error) {
	return "", errNotYet
}

func (r *reads) RunsLiveOnHost(ctx context.Context, host string) ([]store.LiveRun, error) {
	return nil, errNotYet
}

func (r *reads) RunsLeaseExpired(ctx context.Context, now store.LeaseClock) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) ClaimQueues(ctx context.Context, names []string) ([]store.ClaimQueue, error) {
	return nil, errNotYet
}

func (r *reads) ClaimHeads(ctx context.Context, queue string, limit int, out []store.ClaimHead) ([]store.ClaimHead, error) {
	return nil, errNotYet
}

func (r *reads) CompletionTasks(ctx context.Context, prefix string, limit, narrow int) ([]store.TaskHint, error) {
	return nil, errNotYet
}

func (r *reads) CompletionQueues(ctx context.Context) ([]string, error) {
	return nil, errNotYet
}

func (tx *Tx) ClaimTasks(ctx context.Context, c store.Claim) error {
	return errNotYet
}

func (tx *Tx) RunStart(ctx context.Context, s store.RunStart) (taskID string, err error) {
	return "", errNotYet
}

func (tx *Tx) RunsStart(ctx context.Context, starts []store.RunStart) error {
	return errNotYet
}

func (tx *Tx) RunUpdate(ctx context.Context, u store.RunUpdate) (bool, error) {
	return false, errNotYet
}

func (tx *Tx) RunsSucceed(ctx context.Context, ends []store.RunEnd) ([]store.RunView, error) {
	return nil, errNotYet
}

func (tx *Tx) TasksDone(ctx context.Context, at string, ids []string) (map[string]store.DoneTask, error) {
	return nil, errNotYet
}

func (tx *Tx) RunLeaseRenew(ctx context.Context, id, token string, l store.Lease, now store.LeaseClock) (state string, err error) {
	return "", errNotYet
}
