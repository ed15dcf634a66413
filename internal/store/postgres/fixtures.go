package postgres

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

func (tx *Tx) FixtureRunAdd(ctx context.Context, r store.RunView, queue string) error {
	return errNotYet
}
