package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (r *reads) QueueGet(ctx context.Context, name string) (*store.Queue, error) {
	return nil, errNotYet
}

func (tx *Tx) QueueEnsure(ctx context.Context, name, at string) error {
	return errNotYet
}
