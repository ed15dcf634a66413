package store

// RunReader and RunWriter are the operations for claims, starts, leases, cancels and ends of runs (internal/queue's runs.go, complete.go, lease.go).
type RunReader interface{}

// RunWriter: see RunReader.
type RunWriter interface{}
