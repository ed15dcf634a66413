package store

// UpkeepReader and UpkeepWriter are the operations for the maintenance pass: reaping lost runs, promoting due tasks, start timeouts, long-run warnings, cleanup of old work and the event sweep (maintenance.go, sweep.go, cleanup.go).
type UpkeepReader interface{}

// UpkeepWriter: see UpkeepReader.
type UpkeepWriter interface{}
