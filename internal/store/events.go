package store

import "context"

// Event is one row of the event log. Data is JSON text, or "" for none.
type Event struct {
	At, Kind, TaskID, RunID, From, To, Reason, Data string
}

// EventWriter appends to the event log.
type EventWriter interface {
	// EventAdd appends e; events get strictly increasing seqs in the
	// order they are added and, across transactions, in commit order.
	EventAdd(ctx context.Context, e Event) error
}
