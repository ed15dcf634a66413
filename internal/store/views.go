package store

// ViewReader and ViewWriter are the operations for what commands read and operators set: listing and showing tasks and runs, events, health figures, queue settings, workers (read.go, health.go, queues.go, workers.go).
type ViewReader interface{}

// ViewWriter: see ViewReader.
type ViewWriter interface{}
