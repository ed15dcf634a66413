package postgres

import "context"

// EventLastSeq is the seq of the newest event committed: the counter's
// value, written in the transaction that wrote the event.
func (r *reads) EventLastSeq(ctx context.Context) (int64, error) {
	if r.tx != nil {
		return r.tx.EventLastSeq(ctx)
	}
	var last int64
	err := r.q.QueryRow(ctx, `SELECT last FROM event_seq`).Scan(&last)
	return last, err
}
