package store

// IntakeReader and IntakeWriter are the operations for creating, enqueuing and editing tasks: enqueue, batches, dependencies, hold, release, retry, cancel, the spool drain (create.go, edit.go, ops.go, spooldrain.go).
type IntakeReader interface{}

// IntakeWriter: see IntakeReader.
type IntakeWriter interface{}
