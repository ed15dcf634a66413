package store

import "context"

// Run is a runs row as a worker or the reaper needs it.
type Run struct {
	ID, TaskID, State, Queue, Token, Host, LeaseExpires string
	Created, Started                                    string // started "" until running
	Attempt, Pgid                                       int
	// BootID and LeaseUntil are the lease on the boot clock ("" and 0
	// for a run judged on the wall clock).
	BootID     string
	LeaseUntil int64
}

// RunReader and RunWriter are the operations for claims, starts, leases,
// cancels and ends of runs.
type RunReader interface {
	// RunGet reads one run; ErrNotFound when there is none.
	RunGet(ctx context.Context, id string) (*Run, error)
}

// RunWriter: see RunReader.
type RunWriter interface{}
