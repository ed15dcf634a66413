package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) QueueList(ctx context.Context) ([]*store.Queue, error) {
	return nil, errNotYet
}

func (r *reads) RunsStartLate(ctx context.Context, queue string, before store.LeaseClock) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) TaskDepsWindow(ctx context.Context, after string, limit int) (last string, n int, err error) {
	return "", 0, errNotYet
}

func (r *reads) TaskOrphans(ctx context.Context, lo, hi string) ([]store.TaskOrphan, error) {
	return nil, errNotYet
}

func (r *reads) TaskBlockedReady(ctx context.Context, at string) ([]*store.Task, error) {
	return nil, errNotYet
}

func (r *reads) TaskWaitingUnwarned(ctx context.Context, queue, before string, limit int) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) TaskExpiredCount(ctx context.Context, state, before string) (int, error) {
	return 0, errNotYet
}

func (r *reads) TaskExpiredEach(ctx context.Context, state, before string, fn func(id string) error) error {
	return errNotYet
}

func (r *reads) TaskExpiredList(ctx context.Context, state, before string, limit int) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) RunIDsOfTasks(ctx context.Context, taskIDs []string) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) RunStored(ctx context.Context, ids []string) ([]string, error) {
	return nil, errNotYet
}

func (r *reads) RunEndedList(ctx context.Context, after, afterID, before string, limit int) ([]store.RunEnded, error) {
	return nil, errNotYet
}

func (r *reads) FreePagesCount(ctx context.Context) (int, error) {
	return 0, errNotYet
}

func (tx *Tx) SystemStateSet(ctx context.Context, key, value, at string) error {
	return errNotYet
}

func (tx *Tx) SystemStateDelete(ctx context.Context, key string) error {
	return errNotYet
}

func (tx *Tx) TaskDepCountsHeal(ctx context.Context, lo, hi string) error {
	return errNotYet
}

func (tx *Tx) TaskWarnedSet(ctx context.Context, id string) (bool, error) {
	return false, errNotYet
}

func (tx *Tx) TaskDelete(ctx context.Context, state string, ids []string) (deleted []string, spans []store.EventSpan, err error) {
	return nil, nil, errNotYet
}

func (tx *Tx) EventSweep(ctx context.Context, lo, hi int64) (int, error) {
	return 0, errNotYet
}

func (tx *Tx) FreePagesRelease(ctx context.Context, pages int) error {
	return errNotYet
}
