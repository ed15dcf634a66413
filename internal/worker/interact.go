package worker

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// askedFor is how long r's questions (cq ask) have waited for an answer,
// read when its time limit seems reached: that wait is not counted
// (docs/interactive.md), unless r's queue counts it
// (--timeout-counts-asks, read then too). A store that cannot be read
// counts none.
func (w *Worker) askedFor(r *run) func() time.Duration {
	return func() time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		counts, err := w.st.QueueCountsAsks(ctx, r.c.Queue)
		if err != nil {
			w.log.Warn("run.question_wait_unread", "task", r.c.TaskID, "run", r.c.RunID, "error", err.Error())
			return 0
		}
		if counts {
			return 0
		}
		d, err := w.st.QuestionWait(ctx, r.c.RunID, r.c.TaskID)
		if err != nil {
			w.log.Warn("run.question_wait_unread", "task", r.c.TaskID, "run", r.c.RunID, "error", err.Error())
			return 0
		}
		return d
	}
}

// denyQuestions, at a graceful stop, denies the open questions of the
// worker's runs ("shutdown") and releases those runs at once: nobody
// will answer them before the stop, and their tasks go back to todo to
// ask again on another worker.
func (w *Worker) denyQuestions(ctx context.Context) {
	runs := w.liveRuns()
	if len(runs) == 0 {
		return
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.c.RunID
	}
	had, err := w.st.DenyQuestionsOfRuns(ctx, ids, queue.DenyShutdown)
	if err != nil {
		w.log.Warn("worker.questions_not_denied", "worker", w.id, "error", err.Error())
		return
	}
	for _, r := range runs {
		if had[r.c.RunID] {
			w.log.Info("run.releasing", "task", r.c.TaskID, "run", r.c.RunID, "why", "shutdown during a question")
			r.kill(killRelease, w.opt.Grace)
		}
	}
}

// progressFlushEvery is how often a worker with live runs writes the
// events of progress reports held back by the rate limit: the latest
// report's event then follows it within about a second, not at the next
// heartbeat (docs/interactive.md).
const progressFlushEvery = time.Second

// flushProgress writes held-back progress events, at most every
// progressFlushEvery (loop goroutine, while runs are live).
func (w *Worker) flushProgress(ctx context.Context) {
	if time.Since(w.progressAt) < progressFlushEvery {
		return
	}
	w.progressAt = time.Now()
	if _, err := w.st.FlushProgress(ctx, 100); err != nil {
		w.log.Warn("store.error", "op", "progress events", "error", err.Error())
	}
}
