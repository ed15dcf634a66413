package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// Health verdicts, from best to worst.
const (
	HealthOK        = "ok"
	HealthDegraded  = "degraded"
	HealthUnhealthy = "unhealthy"
)

// Thresholds are cq health's limits (docs/operations.md, Health); each is a flag of
// cq health.
type Thresholds struct {
	SuccessDegraded  float64       // success rate at or below this: degraded (0.95)
	SuccessUnhealthy float64       // below this: unhealthy (0.80)
	BacklogDegraded  int           // backlog at or above this: degraded (10)
	BacklogUnhealthy int           // above this: unhealthy (50)
	BlockedDegraded  int           // tasks blocked for retry at or above this: degraded (3)
	BlockedUnhealthy int           // above this: unhealthy (10)
	FailedDegraded   int           // failed_24h at or above this: degraded (5)
	HeartbeatMaxAge  time.Duration // a heartbeat this old or older: unhealthy (5m)
	Window           time.Duration // the window for run figures (24h)
}

// DefaultThresholds are cq health's defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{
		SuccessDegraded: 0.95, SuccessUnhealthy: 0.80,
		BacklogDegraded: 10, BacklogUnhealthy: 50,
		BlockedDegraded: 3, BlockedUnhealthy: 10,
		FailedDegraded: 5, HeartbeatMaxAge: 5 * time.Minute, Window: 24 * time.Hour,
	}
}

// QueueHealth is one queue's line in Health.
type QueueHealth struct {
	Backlog     int  `json:"backlog"`
	Running     int  `json:"running"`
	Paused      bool `json:"paused"`
	Concurrency int  `json:"concurrency"`
}

// Health is cq health's report (its JSON shape in docs/operations.md).
type Health struct {
	Status             string                 `json:"status"`
	SuccessRate        *float64               `json:"success_rate"`
	Backlog            int                    `json:"backlog"`
	BlockedRetry       int                    `json:"blocked_retry"`
	Failed24h          int                    `json:"failed_24h"`
	AvgDurationSeconds *float64               `json:"avg_duration_seconds"`
	LastHeartbeat      *string                `json:"last_heartbeat"`
	States             map[string]int         `json:"states"`
	Queues             map[string]QueueHealth `json:"queues"`
	Warnings           []string               `json:"warnings"`
	OldestWaiting      *OldestTask            `json:"oldest_waiting"`
	// WaitingWarned counts the todo tasks that have waited longer than
	// their queue's warn-after (the wait warning's number).
	WaitingWarned int `json:"waiting_warned"`
	// RunsFinished counts runs that ended within the window, by state.
	RunsFinished map[string]int `json:"runs_finished"`
	Window       string         `json:"window"`
	CheckedAt    string         `json:"checked_at"`
}

// OldestTask names the task that has waited longest in todo.
type OldestTask struct {
	ID      string  `json:"id"`
	Queue   string  `json:"queue"`
	Since   string  `json:"since"`
	Seconds float64 `json:"waiting_seconds"`
}

// Health gathers the figures and decides the verdict: the worst row of
// table in docs/operations.md, Health.
func (s *Store) Health(ctx context.Context, th Thresholds) (*Health, error) {
	now := s.now()
	h := &Health{States: map[string]int{}, Queues: map[string]QueueHealth{}, Warnings: []string{},
		RunsFinished: map[string]int{}, Window: th.Window.String(), CheckedAt: FormatTime(now)}
	// Every figure from one snapshot, so that they agree (a backlog never
	// above the todo count) while producers and workers commit.
	err := s.st.Snapshot(ctx, func(q store.Reader) error { return s.healthFigures(ctx, q, h, th, now) })
	if err != nil {
		return nil, err
	}
	h.Status, h.Warnings = verdict(h, th, now, h.Warnings)
	return h, nil
}

// healthFigures reads h's figures from q.
func (s *Store) healthFigures(ctx context.Context, q store.Reader, h *Health, th Thresholds, now time.Time) error {
	for _, st := range TaskStates {
		h.States[st] = 0
	}
	if err := q.TaskStateCounts(ctx, func(st string, n int) { h.States[st] = n }); err != nil {
		return err
	}

	qs, err := q.QueueListWithCounts(ctx)
	if err != nil {
		return err
	}
	for _, qq := range qs {
		h.Queues[qq.Name] = QueueHealth{Backlog: qq.Backlog, Running: qq.Running, Paused: qq.Paused, Concurrency: qq.Concurrency}
		if !qq.Paused {
			h.Backlog += qq.Backlog
		}
	}
	if h.BlockedRetry, err = q.TaskRetryBlockedCount(ctx); err != nil {
		return err
	}

	since := FormatTime(now.Add(-th.Window))
	for _, st := range []string{RunSucceeded, RunFailed, RunTimeout, RunCancelled} {
		h.RunsFinished[st] = 0
	}
	if err := q.RunEndedCounts(ctx, since, func(st string, n int) { h.RunsFinished[st] = n }); err != nil {
		return err
	}
	ok, bad := h.RunsFinished[RunSucceeded], h.RunsFinished[RunFailed]+h.RunsFinished[RunTimeout]
	h.Failed24h = bad
	if ok+bad > 0 {
		r := float64(ok) / float64(ok+bad)
		h.SuccessRate = &r
	}
	if avg, ok, err := q.RunEndedAvgSeconds(ctx, since); err != nil {
		return err
	} else if ok {
		h.AvgDurationSeconds = &avg
	}

	// The oldest waiting task is left out when it cannot be read.
	if oid, oq, oat, err := q.TaskOldestTodo(ctx); err == nil && oid != "" {
		h.OldestWaiting = &OldestTask{ID: oid, Queue: oq, Since: oat, Seconds: now.Sub(ParseStoredTime(oat)).Seconds()}
	}
	waiting, err := q.TaskWaitWarnedCount(ctx)
	if err != nil {
		return err
	}
	h.WaitingWarned = waiting
	if waiting > 0 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("%d task(s) waiting in todo longer than their queue's warn-after", waiting))
	}

	// A schedule whose newest task failed: its job is broken until a
	// later slot succeeds (docs/schedules.md). A warning, as the failed
	// run already counts in the success rate.
	failed, err := scheduleFailures(ctx, q)
	if err != nil {
		return err
	}
	for _, f := range failed {
		h.Warnings = append(h.Warnings, "schedule "+f+": its last task failed")
	}

	// Work that waits with no worker to take it: the verdict is left as
	// it is (a backlog has its own row), but the likeliest cause is said.
	if h.Backlog > 0 {
		live, err := anyWorkerLive(ctx, q, s.leaseNow(now))
		if err != nil {
			return err
		}
		if !live {
			h.Warnings = append(h.Warnings, NoWorkerWarning(h.Backlog))
		}
	}

	if v, ok, err := q.SystemStateGet(ctx, "last_heartbeat"); err != nil {
		return err
	} else if ok {
		h.LastHeartbeat = &v
	}
	return nil
}

// NoWorkerWarning is cq health's warning when n tasks are runnable and
// no worker is live.
func NoWorkerWarning(n int) string {
	tasks := "tasks"
	if n == 1 {
		tasks = "task"
	}
	return fmt.Sprintf("%d %s runnable and no worker is live (start one: cq worker)", n, tasks)
}

// verdict applies the thresholds; the worst row decides, and each row that
// is not ok adds a warning saying why.
func verdict(h *Health, th Thresholds, now time.Time, warnings []string) (string, []string) {
	status := HealthOK
	worse := func(s, why string) {
		warnings = append(warnings, s+": "+why)
		if s == HealthUnhealthy || status == HealthOK {
			status = s
		}
	}
	if h.SuccessRate != nil {
		r := *h.SuccessRate
		switch {
		case r < th.SuccessUnhealthy:
			worse(HealthUnhealthy, fmt.Sprintf("success rate %.1f%% below %.0f%%", r*100, th.SuccessUnhealthy*100))
		case r <= th.SuccessDegraded:
			worse(HealthDegraded, fmt.Sprintf("success rate %.1f%% not above %.0f%%", r*100, th.SuccessDegraded*100))
		}
	}
	switch {
	case h.Backlog > th.BacklogUnhealthy:
		worse(HealthUnhealthy, fmt.Sprintf("backlog %d above %d", h.Backlog, th.BacklogUnhealthy))
	case h.Backlog >= th.BacklogDegraded:
		worse(HealthDegraded, fmt.Sprintf("backlog %d at or above %d", h.Backlog, th.BacklogDegraded))
	}
	switch {
	case h.BlockedRetry > th.BlockedUnhealthy:
		worse(HealthUnhealthy, fmt.Sprintf("%d tasks blocked for retry, above %d", h.BlockedRetry, th.BlockedUnhealthy))
	case h.BlockedRetry >= th.BlockedDegraded:
		worse(HealthDegraded, fmt.Sprintf("%d tasks blocked for retry, at or above %d", h.BlockedRetry, th.BlockedDegraded))
	}
	if h.Failed24h >= th.FailedDegraded {
		worse(HealthDegraded, fmt.Sprintf("%d runs failed or timed out in %s, at or above %d", h.Failed24h, th.Window, th.FailedDegraded))
	}
	if h.LastHeartbeat == nil {
		worse(HealthUnhealthy, "no heartbeat ever recorded (run cq heartbeat from cron, or a worker)")
	} else if age := now.Sub(ParseStoredTime(*h.LastHeartbeat)); age >= th.HeartbeatMaxAge {
		worse(HealthUnhealthy, fmt.Sprintf("last heartbeat %s ago, %s or more", age.Round(time.Second), th.HeartbeatMaxAge))
	}
	return status, warnings
}
