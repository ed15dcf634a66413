package store

import "context"

// Queue is a queues row's settings.
type Queue struct {
	Name             string
	Paused           bool
	Concurrency      int
	Retries          int
	BackoffMS        int64
	TransientRetries int
	TimeoutRetries   int
	TimeoutMS        int64
	StartTimeoutMS   int64
	WarnAfterMS      int64
	// TimeoutCountsAsks: the time its runs wait for answers (cq ask)
	// counts toward their time limit.
	TimeoutCountsAsks bool
}

// QueueReader reads queues.
type QueueReader interface {
	// QueueGet reads one queue's settings; ErrNotFound when no task or
	// command has named it yet.
	QueueGet(ctx context.Context, name string) (*Queue, error)
}

// QueueWriter changes queues.
type QueueWriter interface {
	// QueueEnsure records that a queue exists, unless it does, with the
	// default settings: not paused, no concurrency limit (0), 0 retries,
	// a backoff of 30000 ms, 3 transient and 1 timeout retries, no run
	// time limit (0), a start timeout and a warn-after of 600000 ms, and
	// questions' waits not counted by the time limit.
	QueueEnsure(ctx context.Context, name, at string) error
}
