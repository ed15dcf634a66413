package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Task is a task as cq prints it (its JSON shape in docs/commands.md,
// plus the spec fields). Optional values are null, never missing.
type Task struct {
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Queue         string            `json:"queue"`
	Key           *string           `json:"key"`
	Priority      string            `json:"priority"`
	Attempts      int               `json:"attempts"`
	BlockedReason *string           `json:"blocked_reason"`
	NotBefore     *string           `json:"not_before"`
	After         []string          `json:"after"`
	CreatedAt     string            `json:"created_at"`
	UpdatedAt     string            `json:"updated_at"`
	FinishedAt    *string           `json:"finished_at"`
	Reason        *string           `json:"reason"`
	Hold          bool              `json:"hold"`
	Unique        bool              `json:"unique"`
	Probe         bool              `json:"probe"`
	Cmd           []string          `json:"cmd,omitempty"`
	Shell         string            `json:"shell,omitempty"`
	Intent        string            `json:"intent,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Timeout       *string           `json:"timeout"`
	Retries       *int              `json:"retries"`
	Env           map[string]string `json:"env,omitempty"`
	Cwd           *string           `json:"cwd"`
	// Progress and Question are a doing task's live run's latest
	// progress and open question (docs/interactive.md).
	Progress  *Progress  `json:"progress"`
	Question  *Question  `json:"question"`
	Runs      *[]Run     `json:"runs,omitempty"`
	Questions []Question `json:"questions,omitempty"` // cq show: every question of its runs
	Messages  []Message  `json:"messages,omitempty"`  // cq show: every message sent to it
}

// Run is one attempt as cq prints it.
type Run struct {
	ID        string  `json:"id"`
	TaskID    string  `json:"task_id"`
	Attempt   int     `json:"attempt"`
	State     string  `json:"state"`
	ExitCode  *int    `json:"exit_code"`
	Signal    *string `json:"signal"`
	Worker    *string `json:"worker"`
	StartedAt *string `json:"started_at"`
	EndedAt   *string `json:"ended_at"`
	Error     *string `json:"error"`
	Reason    *string `json:"reason"`
	CreatedAt string  `json:"created_at"`
	// Progress is the run's latest progress report (cq show).
	Progress *Progress `json:"progress,omitempty"`
}

// Command renders the task's command for a table.
func (t *Task) Command() string {
	switch {
	case t.Shell != "":
		return t.Shell
	case t.Intent != "":
		return "intent:" + t.Intent
	}
	q := make([]string, len(t.Cmd))
	for i, a := range t.Cmd {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote renders one argument so that the listing reads as the
// command a user would type.
func shellQuote(a string) string {
	plain := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)
	}
	if a != "" && strings.IndexFunc(a, func(r rune) bool { return !plain(r) }) < 0 {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func taskView(r *taskRow) *Task {
	var sp Spec
	_ = json.Unmarshal([]byte(r.Spec), &sp)
	t := &Task{
		ID: r.ID, State: r.State, Queue: r.Queue, Key: strp(r.Key), Priority: PriorityName(r.Priority),
		Attempts: r.Attempts, BlockedReason: strp(r.BlockedReason), After: []string{},
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: strp(r.FinishedAt), Reason: strp(r.Reason),
		Hold: r.Hold, Unique: r.Unique, Probe: sp.Probe, Cmd: sp.Cmd, Shell: sp.Shell, Intent: sp.Intent, Payload: sp.Payload,
		Timeout: strp(sp.Timeout), Retries: sp.Retries, Env: sp.Env, Cwd: strp(sp.Cwd),
	}
	if r.State == TaskBlocked || r.State == TaskInbox {
		t.NotBefore = strp(r.NotBefore)
	}
	if r.State != TaskBlocked {
		t.BlockedReason = nil
	}
	return t
}

// ListFilter selects tasks for List.
type ListFilter struct {
	States []string
	Queue  string
	Key    string
	Limit  int // 0 = all
}

func (f ListFilter) store() store.TaskFilter {
	return store.TaskFilter{States: f.States, Queue: f.Queue, Key: f.Key, Limit: f.Limit}
}

// List returns tasks newest first.
func (s *Store) List(ctx context.Context, f ListFilter) ([]*Task, error) {
	var out []*Task
	err := s.ListEach(ctx, f, func(t *Task) error {
		out = append(out, t)
		return nil
	})
	return out, err
}

// listChunk is how many tasks ListEach holds at a time.
const listChunk = 500

// ListEach calls fn with each task List returns, in the same order,
// holding at most listChunk of them at a time: cq ls --limit 0 of a
// million tasks streams them instead of building them all first.
func (s *Store) ListEach(ctx context.Context, f ListFilter, fn func(*Task) error) error {
	n := listChunk
	if f.Limit > 0 {
		n = min(n, f.Limit)
	}
	chunk := make([]*Task, 0, n)
	ids := make([]string, 0, n)
	byID := make(map[string]*Task, n)
	var live *liveInteraction
	flush := func() error {
		if err := s.fillAfter(ctx, ids, byID); err != nil {
			return err
		}
		for _, t := range chunk {
			if t.State != TaskDoing {
				continue
			}
			if live == nil {
				li, err := readLiveInteraction(ctx, s.st)
				if err != nil {
					return err
				}
				live = &li
			}
			live.fill(t)
		}
		for _, t := range chunk {
			if err := fn(t); err != nil {
				return err
			}
		}
		chunk, ids = chunk[:0], ids[:0]
		clear(byID)
		return nil
	}
	err := s.st.TaskList(ctx, f.store(), func(r *taskRow) error {
		t := taskView(r)
		chunk = append(chunk, t)
		ids = append(ids, t.ID)
		byID[t.ID] = t
		if len(chunk) == listChunk {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// Count is how many tasks List's filter selects, its limit aside: a list
// cut short by the limit can say how many it left out.
func (s *Store) Count(ctx context.Context, f ListFilter) (int, error) {
	return s.st.TaskCount(ctx, f.store())
}

// ListIDEach calls fn with the id of each task List returns, in the same
// order, without reading the rest of each task (cq ls -q).
func (s *Store) ListIDEach(ctx context.Context, f ListFilter, fn func(id string) error) error {
	return s.st.TaskListIDs(ctx, f.store(), fn)
}

// fillAfter loads the dependencies of the tasks ids, byID their views.
func (s *Store) fillAfter(ctx context.Context, ids []string, byID map[string]*Task) error {
	return s.st.TaskDependencies(ctx, ids, func(tid, dep string) {
		if t := byID[tid]; t != nil {
			t.After = append(t.After, dep)
		}
	})
}

// Get returns one task with its runs, oldest first.
func (s *Store) Get(ctx context.Context, ref string) (*Task, error) {
	id, err := s.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.GetID(ctx, id)
}

// GetID is Get of a task's exact id, which is not resolved first (one
// read fewer): for a caller that has just created the task.
func (s *Store) GetID(ctx context.Context, id string) (*Task, error) {
	r, err := getTask(ctx, s.st, id)
	if err != nil {
		return nil, err
	}
	t := taskView(r)
	if err := s.fillAfter(ctx, []string{t.ID}, map[string]*Task{t.ID: t}); err != nil {
		return nil, err
	}
	runs, err := s.Runs(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	t.Runs = &runs
	if len(runs) == 0 {
		// Questions, messages and progress all belong to runs.
		return t, nil
	}
	if err := s.fillInteraction(ctx, t, runs); err != nil {
		return nil, err
	}
	return t, nil
}

// fillInteraction sets what cq show prints of t's runs talking back: each
// run's progress, the live run's open question, every question and
// message.
func (s *Store) fillInteraction(ctx context.Context, t *Task, runs []Run) error {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	ps, err := s.RunProgress(ctx, ids)
	if err != nil {
		return err
	}
	for i := range runs {
		runs[i].Progress = ps[runs[i].ID]
		if runs[i].EndedAt == nil && t.State == TaskDoing {
			t.Progress = runs[i].Progress
		}
	}
	if t.Questions, err = s.Questions(ctx, t.ID, runs); err != nil {
		return err
	}
	for i := range t.Questions {
		if q := &t.Questions[i]; q.State == AskOpen && t.State == TaskDoing {
			t.Question = q
			break
		}
	}
	t.Messages, err = s.Messages(ctx, t.ID)
	return err
}

// TaskStatus is a task's state and reason, what cq wait watches.
type TaskStatus struct {
	State  string
	Reason *string
}

// TaskStatuses reads the state and reason of the tasks with these exact
// ids; an id with no task is left out.
func (s *Store) TaskStatuses(ctx context.Context, ids []string) (map[string]TaskStatus, error) {
	out := make(map[string]TaskStatus, len(ids))
	err := s.st.TaskStates(ctx, ids, func(id, state, reason string) {
		out[id] = TaskStatus{State: state, Reason: strp(reason)}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runOf is the run v as cq prints it; its fields point into v.
func runOf(v *store.RunView) Run {
	orNil := func(p *string) *string { // "" is none
		if *p == "" {
			return nil
		}
		return p
	}
	return Run{ID: v.ID, TaskID: v.TaskID, Attempt: v.Attempt, State: v.State, ExitCode: v.ExitCode,
		Signal: orNil(&v.Signal), Worker: orNil(&v.Worker), StartedAt: orNil(&v.StartedAt), EndedAt: orNil(&v.EndedAt),
		Error: orNil(&v.Error), Reason: orNil(&v.Reason), CreatedAt: v.CreatedAt}
}

// Runs returns a task's runs, oldest first.
func (s *Store) Runs(ctx context.Context, taskID string) ([]Run, error) {
	vs, err := s.st.RunViewList(ctx, taskID)
	if err != nil {
		return nil, err
	}
	runs := make([]Run, len(vs))
	for i := range vs {
		runs[i] = runOf(&vs[i])
	}
	return runs, nil
}

// Event is one entry of the event log (docs/events.md).
type Event struct {
	Seq    int64           `json:"seq"`
	At     string          `json:"at"`
	Kind   string          `json:"kind"`
	TaskID *string         `json:"task_id"`
	RunID  *string         `json:"run_id"`
	From   *string         `json:"from"`
	To     *string         `json:"to"`
	Reason *string         `json:"reason"`
	Data   json.RawMessage `json:"data"` // null when the event has none
}

// eventOf is an event as cq prints it, without its data.
func eventOf(r *store.EventRecord) Event {
	return Event{Seq: r.Seq, At: r.At, Kind: r.Kind, TaskID: strp(r.TaskID), RunID: strp(r.RunID),
		From: strp(r.From), To: strp(r.To), Reason: strp(r.Reason)}
}

// Events returns up to limit events with seq > since, in seq order.
func (s *Store) Events(ctx context.Context, since int64, limit int) ([]Event, error) {
	var out []Event
	err := s.st.EventList(ctx, since, limit, func(r *store.EventRecord) {
		e := eventOf(r)
		if r.Data != "" {
			e.Data = json.RawMessage(r.Data)
		}
		out = append(out, e)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastSeq is the seq of the newest event, or 0.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	return s.st.EventLastSeq(ctx)
}

// TaskEvents returns every event of one task, in order (their data left
// out).
func (s *Store) TaskEvents(ctx context.Context, taskID string) ([]Event, error) {
	var out []Event
	err := s.st.EventListOfTask(ctx, taskID, func(r *store.EventRecord) {
		e := eventOf(r)
		if r.Data != "" {
			e.Data = json.RawMessage(r.Data)
		}
		out = append(out, e)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PromoteDue moves blocked tasks whose time has come (a retry backoff or a
// schedule) and that nothing else blocks back to todo. It returns how many
// moved.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	n := 0
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		due, err := tx.TaskDue(ctx, FormatTime(now))
		if err != nil {
			return err
		}
		n, err = promote(ctx, tx, now, due, func(t *taskRow) string {
			if t.NotBeforeWhy != "" {
				return t.NotBeforeWhy + " due"
			}
			return "due"
		})
		return err
	})
	return n, err
}

// promote moves blocked tasks that nothing blocks any more to todo, each
// with the reason why(t), and returns how many moved.
func promote(ctx context.Context, tx store.Tx, now time.Time, ts []*taskRow, why func(*taskRow) string) (int, error) {
	for i, t := range ts {
		if err := casTask(ctx, tx, now, t, TaskTodo, "", why(t), todoNow(now)); err != nil {
			return i, err
		}
	}
	return len(ts), nil
}

// HasRunnable reports, without taking the write lock, whether any task is
// waiting at the head of a lane; a worker checks it before claiming.
func (s *Store) HasRunnable(ctx context.Context) (bool, error) {
	return s.st.TaskRunnableExists(ctx)
}

// NextDue is the earliest time a blocked task waits for (a backoff or a
// schedule), if any.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	nb, err := s.st.TaskNextDue(ctx)
	if err != nil || nb == "" {
		return time.Time{}, false, err
	}
	return ParseStoredTime(nb), true, nil
}

// QueueTimeouts returns each queue's run time limit (0: none).
func (s *Store) QueueTimeouts(ctx context.Context) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	err := s.st.QueueTimeouts(ctx, func(name string, ms int64) {
		out[name] = time.Duration(ms) * time.Millisecond
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CancellingRuns returns the ids of this worker's runs that a user asked
// to cancel.
func (s *Store) CancellingRuns(ctx context.Context, worker string) ([]string, error) {
	return s.st.RunCancellingIDs(ctx, worker)
}

// RunOutput is the end of run id's output kept in the store (see
// store.RunOutput); nil when none was kept.
func (s *Store) RunOutput(ctx context.Context, id string) (*store.RunOutput, error) {
	o, err := s.st.RunOutputGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return o, err
}
