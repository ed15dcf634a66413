package sqlite

import (
	"context"

	"github.com/cq-dev/cq/internal/store"
)

// eventRows is the INSERT of the events a transaction writes: they go in
// with one statement when it commits (see Batch), in the order they were
// added, so their seqs follow that order.
var eventRows = NewBatch(`INSERT INTO events (at, kind, task_id, run_id, from_state, to_state, reason, data) VALUES `, 8)

func (t *Tx) EventAdd(_ context.Context, e store.Event) error {
	return t.Add(eventRows, e.At, e.Kind, nullable(e.TaskID), nullable(e.RunID), nullable(e.From), nullable(e.To), nullable(e.Reason), nullable(e.Data))
}

// TaskSeqNext is the seq the next event gets: under SQLite's one writer
// that orders lanes as the gateway events do.
func (t *Tx) TaskSeqNext(ctx context.Context) (int64, error) {
	// The events still pending take their seqs first.
	if err := t.Flush(); err != nil {
		return 0, err
	}
	var seq int64
	err := t.QueryRowContext(ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) + 1`).Scan(&seq)
	return seq, err
}
