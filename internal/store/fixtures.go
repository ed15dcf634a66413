package store

import "context"

// Fixtures are writes only tests make, to set up what cq reaches only
// over time (a run of an earlier attempt, a task finished a month ago).
// A backend's Tx provides them; cq itself never calls them.
type Fixtures interface {
	// FixtureRunAdd stores run r of task r.TaskID in queue as given: its
	// id, attempt, state, worker, exit code, signal, error and times
	// ("" for none), with no lease, no event and no check but that the
	// task exists (ErrNotFound when it does not).
	FixtureRunAdd(ctx context.Context, r RunView, queue string) error
}
