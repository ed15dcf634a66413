// Package heartbeat is the maintenance pass that cron runs through
// cq heartbeat and every worker runs in-process on a timer. Every step is a
// compare-and-set in the store, so passes may overlap safely.
package heartbeat

import (
	"context"

	"github.com/cq-dev/cq/internal/queue"
)

// Result counts what one pass did.
type Result struct {
	Drained  int `json:"drained"`
	Promoted int `json:"promoted"`
}

// Pass runs one maintenance pass over the store whose home folder is home:
// it drains the spool and promotes blocked tasks whose time has come.
func Pass(ctx context.Context, st *queue.Store, home string) (Result, error) {
	var r Result
	var err error
	if r.Drained, err = st.DrainSpool(ctx, home); err != nil {
		return r, err
	}
	if r.Promoted, err = st.PromoteDue(ctx); err != nil {
		return r, err
	}
	return r, nil
}
