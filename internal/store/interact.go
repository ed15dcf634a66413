package store

import "context"

// Ask is a question a running task asked its operators (cq ask). It is
// open until answered (approved or denied), or denied by its timeout, a
// cancel or its worker's shutdown.
type Ask struct {
	ID            int64 // given by AskAdd, increasing
	RunID, TaskID string
	Question      string
	State         string // open, approved or denied
	Reason        string // the answer's reason; "" for none
	AskedAt       string
	ExpiresAt     string // when its timeout denies it; "" for never
	AnsweredAt    string // "" while open
}

// AskAnswer closes an open question: To is approved or denied.
type AskAnswer struct {
	ID         int64
	To, Reason string
	At         string
}

// Message is a message sent to a running task (cq send), delivered once,
// to the first of its runs that receives (cq recv).
type Message struct {
	ID      int64 // given by MessageAdd, increasing
	TaskID  string
	Body    string
	SentAt  string
	SentRun string // the run that was live when it was sent
	RecvRun string // "" until received
	RecvAt  string // "" until received
}

// RunProgress is a run's latest progress (cq progress). Done and Total are
// -1 for none given.
type RunProgress struct {
	RunID, TaskID string
	Done, Total   int64
	Message       string
	At            string
	// EventAt is when the run's last run.progress event was written ("":
	// never); Pending says the latest progress has no event yet (a
	// rate-limited one: upkeep writes it later).
	EventAt string
	Pending bool
}

// InteractReader and InteractWriter are the operations of runs that talk
// back: questions and answers, messages, and progress.
type InteractReader interface {
	// AskGet reads one question; ErrNotFound when there is none.
	AskGet(ctx context.Context, id int64) (*Ask, error)
	// AskListOpen lists the open questions of live runs (queued,
	// running or cancelling), oldest first.
	AskListOpen(ctx context.Context) ([]Ask, error)
	// AskListOfTask lists every question of a task's runs, oldest first.
	AskListOfTask(ctx context.Context, taskID string) ([]Ask, error)
	// MessageListOfTask lists every message sent to a task, oldest first.
	MessageListOfTask(ctx context.Context, taskID string) ([]Message, error)
	// RunProgressGet reads a run's latest progress; ErrNotFound when it
	// reported none.
	RunProgressGet(ctx context.Context, runID string) (*RunProgress, error)
	// RunProgressOfRuns calls fn with the progress of each run of ids that
	// reported some, in no particular order.
	RunProgressOfRuns(ctx context.Context, ids []string, fn func(p *RunProgress)) error
	// RunProgressLive calls fn with the progress of each live run
	// (queued, running or cancelling) that reported some.
	RunProgressLive(ctx context.Context, fn func(p *RunProgress)) error
	// RunProgressPendingList lists up to limit progress rows still
	// waiting for their event (Pending) whose last event was at or before
	// before (or never written), in no particular order.
	RunProgressPendingList(ctx context.Context, before string, limit int) ([]RunProgress, error)
}

// InteractWriter: see InteractReader.
type InteractWriter interface {
	// AskAdd stores a new open question (its ID, State and AnsweredAt
	// ignored) and returns its id.
	AskAdd(ctx context.Context, a Ask) (int64, error)
	// AskAnswer closes question a.ID if it is still open, and reports
	// whether it did.
	AskAnswer(ctx context.Context, a AskAnswer) (bool, error)
	// AskDenyOpenOfRuns denies, with reason and at, every open question
	// of the runs ids, and returns those it closed, oldest first.
	AskDenyOpenOfRuns(ctx context.Context, ids []string, reason, at string) ([]Ask, error)
	// MessageAdd stores a new message (undelivered: RecvRun and RecvAt
	// ignored) and returns its id.
	MessageAdd(ctx context.Context, m Message) (int64, error)
	// MessagesTake marks every undelivered message of task taskID as
	// received by run runID at at, and returns them, oldest first.
	MessagesTake(ctx context.Context, taskID, runID, at string) ([]Message, error)
	// RunProgressPut stores p as its run's progress, replacing what was
	// stored.
	RunProgressPut(ctx context.Context, p RunProgress) error
	// RunProgressSettle marks p's run's progress as having its event,
	// written at eventAt (Pending false, EventAt eventAt), if it is still
	// pending with p's values (done, total, message and at): a report
	// stored since is left pending. It reports whether it applied.
	RunProgressSettle(ctx context.Context, p RunProgress, eventAt string) (bool, error)
}
