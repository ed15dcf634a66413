package queue

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cq-dev/cq/internal/store"
)

// Runs that talk back (docs/interactive.md): a run asks its operators a
// question and waits for the answer, receives messages while it runs, and
// reports its progress. Each is a write in one transaction with its event.

// The states of a question.
const (
	AskOpen     = "open"
	AskApproved = "approved"
	AskDenied   = "denied"
)

// Why a question was denied without an operator's answer.
const (
	DenyTimeout   = "timeout"
	DenyCancelled = "cancelled"
	DenyShutdown  = "shutdown"
	DenyRunEnded  = "run ended"
)

// Limits of what a run or an operator may store.
const (
	MaxQuestion = 4096
	MaxMessage  = 64 << 10
	MaxProgress = 1024
	// ProgressEventEvery is the least time between two run.progress events of
	// one run: reports in between update the run's progress and leave
	// their event to the next report or to upkeep (FlushProgress).
	ProgressEventEvery = 250 * time.Millisecond
)

// Question is a question as cq prints it.
type Question struct {
	ID         int64   `json:"id"`
	TaskID     string  `json:"task_id"`
	RunID      string  `json:"run_id"`
	Question   string  `json:"question"`
	State      string  `json:"state"`
	Reason     *string `json:"reason"`
	AskedAt    string  `json:"asked_at"`
	ExpiresAt  *string `json:"expires_at"`
	AnsweredAt *string `json:"answered_at"`
}

// Message is a message as cq prints it.
type Message struct {
	ID         int64   `json:"id"`
	TaskID     string  `json:"task_id"`
	Body       string  `json:"body"`
	SentAt     string  `json:"sent_at"`
	ReceivedBy *string `json:"received_by"` // the run that received it
	ReceivedAt *string `json:"received_at"`
}

// Progress is a run's latest progress as cq prints it.
type Progress struct {
	RunID   string  `json:"run_id"`
	Done    *int64  `json:"done"`
	Total   *int64  `json:"total"`
	Message *string `json:"message"`
	At      string  `json:"at"`
}

func questionOf(a *store.Ask) *Question {
	return &Question{ID: a.ID, TaskID: a.TaskID, RunID: a.RunID, Question: a.Question, State: a.State,
		Reason: strp(a.Reason), AskedAt: a.AskedAt, ExpiresAt: strp(a.ExpiresAt), AnsweredAt: strp(a.AnsweredAt)}
}

func messageOf(m *store.Message) Message {
	return Message{ID: m.ID, TaskID: m.TaskID, Body: m.Body, SentAt: m.SentAt, ReceivedBy: strp(m.RecvRun), ReceivedAt: strp(m.RecvAt)}
}

func progressOf(p *store.RunProgress) *Progress {
	out := &Progress{RunID: p.RunID, Message: strp(p.Message), At: p.At}
	if p.Done >= 0 {
		out.Done = &p.Done
	}
	if p.Total >= 0 {
		out.Total = &p.Total
	}
	return out
}

// liveRun reads run id for a command run inside it: it must be running,
// or queued (its worker records a start a moment after the process began,
// so the process may call in before); a run being cancelled, or ended, is
// refused (exit 3).
func liveRun(ctx context.Context, q store.Reader, id, what string) (*store.Run, error) {
	if id == "" {
		return nil, invalidf("cq %s runs inside a task: CQ_RUN_ID is not set", what)
	}
	r, err := q.RunGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no run %q (CQ_RUN_ID)", id)
	}
	if err != nil {
		return nil, err
	}
	if r.State != RunRunning && r.State != RunQueued {
		return nil, conflictf("run %s is %s, not running", id, r.State)
	}
	return r, nil
}

// checkText refuses text that cq cannot store or print on one line.
func checkText(what, s string, limit int, oneLine bool) error {
	switch {
	case s == "":
		return invalidf("%s is empty", what)
	case len(s) > limit:
		return invalidf("%s is %d bytes, more than %d", what, len(s), limit)
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		return invalidf("%s is not UTF-8 text", what)
	case oneLine && strings.ContainsAny(s, "\r\n"):
		return invalidf("%s holds a line break: it must be one line", what)
	}
	return nil
}

// Ask records a question of run runID, open until answered or until
// timeout (0: until the run ends), and returns it.
func (s *Store) Ask(ctx context.Context, runID, question string, timeout time.Duration) (*Question, error) {
	if err := checkText("the question", question, MaxQuestion, false); err != nil {
		return nil, err
	}
	var out *Question
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		r, err := liveRun(ctx, tx, runID, "ask")
		if err != nil {
			return err
		}
		a := store.Ask{RunID: r.ID, TaskID: r.TaskID, Question: question, State: AskOpen, AskedAt: FormatTime(now)}
		if timeout > 0 {
			a.ExpiresAt = FormatTime(now.Add(timeout))
		}
		if a.ID, err = tx.AskAdd(ctx, a); err != nil {
			return err
		}
		out = questionOf(&a)
		return addEvent(ctx, tx, now, event{Kind: "run.asked", TaskID: r.TaskID, RunID: r.ID,
			Data: map[string]any{"ask_id": a.ID, "question": question, "expires_at": out.ExpiresAt}})
	})
	return out, err
}

// QuestionGet reads question id.
func (s *Store) QuestionGet(ctx context.Context, id int64) (*Question, error) {
	a, err := s.st.AskGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no question %d", id)
	}
	if err != nil {
		return nil, err
	}
	return questionOf(a), nil
}

// CloseQuestion denies question id with reason if it is still open (its
// asker gave up: its timeout, or it was interrupted) and returns it as it
// is then.
func (s *Store) CloseQuestion(ctx context.Context, id int64, reason string) (*Question, error) {
	var out *Question
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		a, err := tx.AskGet(ctx, id)
		if err != nil {
			return err
		}
		if a.State == AskOpen {
			if err := answer(ctx, tx, now, a, AskDenied, reason); err != nil {
				return err
			}
		}
		out = questionOf(a)
		return nil
	})
	return out, err
}

// answer closes open question a (updated in place) with its event.
func answer(ctx context.Context, tx store.Tx, now time.Time, a *store.Ask, to, reason string) error {
	at := FormatTime(now)
	ok, err := tx.AskAnswer(ctx, store.AskAnswer{ID: a.ID, To: to, Reason: reason, At: at})
	if err != nil {
		return err
	}
	if !ok {
		return conflictf("question %d of run %s was answered meanwhile", a.ID, a.RunID)
	}
	a.State, a.Reason, a.AnsweredAt = to, reason, at
	return addEvent(ctx, tx, now, event{Kind: "run.answered", TaskID: a.TaskID, RunID: a.RunID, Reason: reason,
		Data: map[string]any{"ask_id": a.ID, "approved": to == AskApproved}})
}

// Answer answers the oldest open question of the run ref names (a run id,
// or a task id or prefix: its live run's), and returns it. None open is a
// conflict (exit 3).
func (s *Store) Answer(ctx context.Context, ref string, approve bool, reason string) (*Question, error) {
	if reason != "" {
		if err := checkText("the reason", reason, MaxQuestion, false); err != nil {
			return nil, err
		}
	}
	to := AskDenied
	if approve {
		to = AskApproved
	}
	var out *Question
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		runID, taskID, err := answerTarget(ctx, tx, ref)
		if err != nil {
			return err
		}
		open, err := tx.AskListOpen(ctx)
		if err != nil {
			return err
		}
		for i := range open {
			if a := &open[i]; a.RunID == runID {
				if err := answer(ctx, tx, now, a, to, reason); err != nil {
					return err
				}
				out = questionOf(a)
				return nil
			}
		}
		return conflictf("task %s has no open question", taskID)
	})
	return out, err
}

// answerTarget is the run a cq answer names: a run id, or a task's live
// run.
func answerTarget(ctx context.Context, tx store.Reader, ref string) (runID, taskID string, err error) {
	if r, err := tx.RunGet(ctx, ref); err == nil {
		return r.ID, r.TaskID, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", "", err
	}
	id, err := resolve(ctx, tx, ref)
	if err != nil {
		return "", "", err
	}
	runID, _, err = tx.RunLiveOfTask(ctx, id)
	if err == nil && runID == "" {
		t, err := getTask(ctx, tx, id)
		if err != nil {
			return "", "", err
		}
		return "", "", conflictf("task %s has no open question: it is %s", id, t.State)
	}
	return runID, id, err
}

// OpenQuestions lists the open questions of live runs, oldest first.
func (s *Store) OpenQuestions(ctx context.Context) ([]*Question, error) {
	as, err := s.st.AskListOpen(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Question, len(as))
	for i := range as {
		out[i] = questionOf(&as[i])
	}
	return out, nil
}

// DenyQuestionsOfRuns denies, with reason, the open questions of the runs
// ids (a worker shutting down with them) and returns the runs that had
// one.
func (s *Store) DenyQuestionsOfRuns(ctx context.Context, ids []string, reason string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		clear(out)
		return denyOpen(ctx, tx, now, ids, reason, out)
	})
	return out, err
}

// denyOpen denies the open questions of runs ids, with their events,
// noting their runs in had (when not nil).
func denyOpen(ctx context.Context, tx store.Tx, now time.Time, ids []string, reason string, had map[string]bool) error {
	as, err := tx.AskDenyOpenOfRuns(ctx, ids, reason, FormatTime(now))
	if err != nil {
		return err
	}
	for _, a := range as {
		if had != nil {
			had[a.RunID] = true
		}
		if err := addEvent(ctx, tx, now, event{Kind: "run.answered", TaskID: a.TaskID, RunID: a.RunID, Reason: reason,
			Data: map[string]any{"ask_id": a.ID, "approved": false}}); err != nil {
			return err
		}
	}
	return nil
}

// Send queues a message for the running task ref names and returns the
// task's id and the message's. A task that is not running is refused
// (exit 3).
func (s *Store) Send(ctx context.Context, ref, body string) (taskID string, id int64, err error) {
	if err := checkText("the message", body, MaxMessage, true); err != nil {
		return "", 0, err
	}
	err = s.write(ctx, func(tx store.Tx, now time.Time) error {
		var err error
		if taskID, err = resolve(ctx, tx, ref); err != nil {
			return err
		}
		runID, state, err := tx.RunLiveOfTask(ctx, taskID)
		if err != nil {
			return err
		}
		if runID == "" || state == RunCancelling {
			t, err := getTask(ctx, tx, taskID)
			if err != nil {
				return err
			}
			what := t.State
			if state == RunCancelling {
				what = "being cancelled"
			}
			return conflictf("cannot send to task %s: it is %s, not running", taskID, what)
		}
		if id, err = tx.MessageAdd(ctx, store.Message{TaskID: taskID, Body: body, SentAt: FormatTime(now), SentRun: runID}); err != nil {
			return err
		}
		return addEvent(ctx, tx, now, event{Kind: "task.message", TaskID: taskID, RunID: runID,
			Data: map[string]any{"message_id": id, "body": body}})
	})
	return taskID, id, err
}

// Receive takes the messages of run runID's task not yet received by any
// of its runs, oldest first.
func (s *Store) Receive(ctx context.Context, runID string) ([]Message, error) {
	var out []Message
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		out = out[:0]
		r, err := liveRun(ctx, tx, runID, "recv")
		if err != nil {
			return err
		}
		ms, err := tx.MessagesTake(ctx, r.TaskID, r.ID, FormatTime(now))
		if err != nil || len(ms) == 0 {
			return err
		}
		ids := make([]int64, len(ms))
		for i := range ms {
			out = append(out, messageOf(&ms[i]))
			ids[i] = ms[i].ID
		}
		return addEvent(ctx, tx, now, event{Kind: "run.received", TaskID: r.TaskID, RunID: r.ID,
			Data: map[string]any{"message_ids": ids}})
	})
	return out, err
}

// Messages lists every message sent to task id, oldest first.
func (s *Store) Messages(ctx context.Context, id string) ([]Message, error) {
	ms, err := s.st.MessageListOfTask(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(ms))
	for i := range ms {
		out[i] = messageOf(&ms[i])
	}
	return out, nil
}

// Questions lists every question of task id's runs, oldest first; an
// open one whose run ended reads as denied, "run ended".
func (s *Store) Questions(ctx context.Context, id string, runs []Run) ([]Question, error) {
	as, err := s.st.AskListOfTask(ctx, id)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, r := range runs {
		live[r.ID] = r.EndedAt == nil
	}
	out := make([]Question, len(as))
	for i := range as {
		out[i] = *questionOf(&as[i])
		if out[i].State == AskOpen && !live[out[i].RunID] {
			out[i].State, out[i].Reason = AskDenied, strp(DenyRunEnded)
		}
	}
	return out, nil
}

// ReportProgress records run runID's progress (done or total below 0:
// not given). It writes a run.progress event unless the run's last one
// is less than ProgressEventEvery old; then the report waits for the next one
// or for upkeep. It reports whether it wrote the event.
func (s *Store) ReportProgress(ctx context.Context, runID string, done, total int64, msg string) (bool, error) {
	if msg != "" {
		if err := checkText("the progress message", msg, MaxProgress, true); err != nil {
			return false, err
		}
	}
	if done < 0 && total < 0 && msg == "" {
		return false, invalidf("give --done, --total or a message")
	}
	if done >= 0 && total >= 0 && done > total {
		return false, invalidf("--done %d is more than --total %d", done, total)
	}
	var evented bool
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		r, err := liveRun(ctx, tx, runID, "progress")
		if err != nil {
			return err
		}
		p := store.RunProgress{RunID: r.ID, TaskID: r.TaskID, Done: done, Total: total, Message: msg, At: FormatTime(now)}
		prev, err := tx.RunProgressGet(ctx, r.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		evented = prev == nil || prev.EventAt == "" || prev.EventAt <= FormatTime(now.Add(-ProgressEventEvery))
		if !evented {
			p.EventAt, p.Pending = prev.EventAt, true
			return tx.RunProgressPut(ctx, p)
		}
		p.EventAt = p.At
		if err := tx.RunProgressPut(ctx, p); err != nil {
			return err
		}
		return progressEvent(ctx, tx, now, &p)
	})
	return evented, err
}

func progressEvent(ctx context.Context, tx store.Tx, now time.Time, p *store.RunProgress) error {
	v := progressOf(p)
	return addEvent(ctx, tx, now, event{Kind: "run.progress", TaskID: p.TaskID, RunID: p.RunID,
		Data: map[string]any{"done": v.Done, "total": v.Total, "message": v.Message, "at": p.At}})
}

// FlushProgress writes the events of rate-limited progress reports whose
// run's last event is at least ProgressEventEvery old (upkeep, each heartbeat),
// at most limit of them, and returns how many.
func (s *Store) FlushProgress(ctx context.Context, limit int) (int, error) {
	now := s.now()
	ps, err := s.st.RunProgressPendingList(ctx, FormatTime(now.Add(-ProgressEventEvery)), limit)
	if err != nil || len(ps) == 0 {
		return 0, err
	}
	n := 0
	err = s.write(ctx, func(tx store.Tx, now time.Time) error {
		n = 0
		for i := range ps {
			// A report stored since the read is left to its own event
			// or the next flush: only the values read get theirs.
			ok, err := tx.RunProgressSettle(ctx, ps[i], FormatTime(now))
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := progressEvent(ctx, tx, now, &ps[i]); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// RunProgress reads the latest progress of the runs ids that reported
// some, by run id.
func (s *Store) RunProgress(ctx context.Context, ids []string) (map[string]*Progress, error) {
	out := map[string]*Progress{}
	err := s.st.RunProgressOfRuns(ctx, ids, func(p *store.RunProgress) { out[p.RunID] = progressOf(p) })
	return out, err
}

// liveInteraction is what the listings show of live runs: their latest
// progress and their open question, by task id.
type liveInteraction struct {
	progress map[string]*Progress
	question map[string]*Question
}

func readLiveInteraction(ctx context.Context, q store.Reader) (liveInteraction, error) {
	li := liveInteraction{progress: map[string]*Progress{}, question: map[string]*Question{}}
	if err := q.RunProgressLive(ctx, func(p *store.RunProgress) { li.progress[p.TaskID] = progressOf(p) }); err != nil {
		return li, err
	}
	as, err := q.AskListOpen(ctx)
	if err != nil {
		return li, err
	}
	for i := range as {
		if _, ok := li.question[as[i].TaskID]; !ok {
			li.question[as[i].TaskID] = questionOf(&as[i])
		}
	}
	return li, nil
}

// fill sets the progress and question of t, a doing task.
func (li liveInteraction) fill(t *Task) {
	if t.State != TaskDoing {
		return
	}
	t.Progress, t.Question = li.progress[t.ID], li.question[t.ID]
}

// QuestionWait is how long run runID's questions have waited for their
// answers, the one still open included: the time its run timeout does not
// count.
func (s *Store) QuestionWait(ctx context.Context, runID, taskID string) (time.Duration, error) {
	as, err := s.st.AskListOfTask(ctx, taskID)
	if err != nil {
		return 0, err
	}
	now := s.now()
	var sum time.Duration
	for _, a := range as {
		if a.RunID != runID {
			continue
		}
		from, err := time.Parse(time.RFC3339Nano, a.AskedAt)
		if err != nil {
			continue
		}
		to := now
		if a.AnsweredAt != "" {
			if t, err := time.Parse(time.RFC3339Nano, a.AnsweredAt); err == nil {
				to = t
			}
		}
		if to.After(from) {
			sum += to.Sub(from)
		}
	}
	return sum, nil
}

// LiveProgress reads the latest progress of every live run that reported
// some, by task id.
func (s *Store) LiveProgress(ctx context.Context) (map[string]*Progress, error) {
	out := map[string]*Progress{}
	err := s.st.RunProgressLive(ctx, func(p *store.RunProgress) { out[p.TaskID] = progressOf(p) })
	return out, err
}
