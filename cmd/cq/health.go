package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/cq-dev/cq/internal/promtext"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of cq health (the Nagios convention).
const (
	healthOK         = 0
	healthDegraded   = 1
	healthUnhealthy  = 2
	healthUnreadable = 3
)

func newHealthCmd(app *App) *cobra.Command {
	th := queue.DefaultThresholds()
	var heartbeatAge, window string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Report the verdict and metrics (-o json, -o prometheus)",
		Long: `Exit codes: 0 ok, 1 degraded, 2 unhealthy, 3 the store cannot be read.
With -o prometheus it exits 0 whenever it could write the metrics, so a
cron line writing a textfile-collector file never leaves it stale: a store
it cannot read gives cq_health_status 3 and cq_store_readable 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := setThresholdTimes(&th, heartbeatAge, window); err != nil {
				return err
			}
			if err := checkThresholds(th); err != nil {
				return err
			}
			st, err := app.ReadStore(cmd.Context())
			var bad *exitErr
			if errors.Is(err, sqlite.ErrUnsupported) || errors.As(err, &bad) {
				return err // a URL refused (exit 1) by every command
			}
			var h *queue.Health
			if err == nil {
				if h, err = st.Health(cmd.Context(), th); err != nil {
					err = fmt.Errorf("cannot read the store: %w", err)
				}
			}
			if err != nil {
				if app.format() == "prometheus" {
					// The verdict is unknown, and the metrics say so: a
					// textfile collector's file then shows it instead of
					// going stale.
					if werr := writeUnreadable(app.Stdout, err); werr != nil {
						return &exitErr{code: healthUnreadable, msg: oneLine(err.Error()) + "; and cannot write the metrics: " + werr.Error()}
					}
					return nil
				}
				return &exitErr{code: healthUnreadable, msg: err.Error()}
			}
			switch {
			case app.format() == "prometheus":
				if err := writePrometheus(app.Stdout, h); err != nil {
					return &exitErr{code: healthUnreadable, msg: err.Error()}
				}
				return nil
			case app.Quiet:
				// -q: the verdict alone, one word (its exit code says it too).
				_, err = fmt.Fprintln(app.Stdout, h.Status)
			case app.format() == "json":
				err = writeJSON(app.Stdout, h)
			case app.format() == "jsonl":
				err = writeJSONLine(app.Stdout, h)
			default:
				err = app.printHealth(h)
			}
			if err != nil {
				// The verdict was not delivered: unknown to the caller
				// (3), not degraded (1), as for -o prometheus.
				return &exitErr{code: healthUnreadable, msg: "cannot write the verdict: " + err.Error()}
			}
			switch h.Status {
			case queue.HealthDegraded:
				return silentExit(healthDegraded)
			case queue.HealthUnhealthy:
				return silentExit(healthUnhealthy)
			}
			return nil
		},
	}
	thresholdFlags(cmd.Flags(), &th, &heartbeatAge, &window)
	return cmd
}

// thresholdFlags registers cq health's threshold flags on f, with th's
// values as defaults (cq serve reads GET /health's parameters with them).
func thresholdFlags(f *pflag.FlagSet, th *queue.Thresholds, heartbeatAge, window *string) {
	f.Float64Var(&th.SuccessDegraded, "success-degraded", th.SuccessDegraded, "success rate at or below this is degraded")
	f.Float64Var(&th.SuccessUnhealthy, "success-unhealthy", th.SuccessUnhealthy, "success rate below this is unhealthy")
	f.IntVar(&th.BacklogDegraded, "backlog-degraded", th.BacklogDegraded, "backlog at or above this is degraded")
	f.IntVar(&th.BacklogUnhealthy, "backlog-unhealthy", th.BacklogUnhealthy, "backlog above this is unhealthy")
	f.IntVar(&th.BlockedDegraded, "blocked-degraded", th.BlockedDegraded, "tasks blocked for retry at or above this is degraded")
	f.IntVar(&th.BlockedUnhealthy, "blocked-unhealthy", th.BlockedUnhealthy, "tasks blocked for retry above this is unhealthy")
	f.IntVar(&th.FailedDegraded, "failed-degraded", th.FailedDegraded, "failed or timed-out runs in the window at or above this is degraded")
	f.StringVar(heartbeatAge, "heartbeat-max-age", "5m", "a last heartbeat this old or older is unhealthy")
	f.StringVar(window, "window", "24h", "the window for run figures")
}

// setThresholdTimes sets the thresholds' heartbeat age and window from
// the values of --heartbeat-max-age and --window.
func setThresholdTimes(th *queue.Thresholds, heartbeatAge, window string) error {
	var err error
	if th.HeartbeatMaxAge, err = queue.ParseDuration(heartbeatAge); err != nil {
		return usageErr("--heartbeat-max-age: %v", err)
	}
	if th.Window, err = queue.ParseDuration(window); err != nil || th.Window <= 0 {
		return usageErr("--window: want a positive duration")
	}
	return nil
}

// checkThresholds refuses thresholds that cannot be (cq health's flags,
// cq serve's GET /health and /metrics parameters), naming the flag.
func checkThresholds(th queue.Thresholds) error {
	for _, c := range []struct {
		name string
		v    float64
	}{{"success-degraded", th.SuccessDegraded}, {"success-unhealthy", th.SuccessUnhealthy}} {
		if c.v < 0 || c.v > 1 {
			return usageErr("--%s is a rate: want 0 to 1", c.name)
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"backlog-degraded", th.BacklogDegraded}, {"backlog-unhealthy", th.BacklogUnhealthy},
		{"blocked-degraded", th.BlockedDegraded}, {"blocked-unhealthy", th.BlockedUnhealthy}, {"failed-degraded", th.FailedDegraded}} {
		if c.v < 0 {
			return usageErr("--%s is a count: want 0 or more", c.name)
		}
	}
	if th.HeartbeatMaxAge < 0 {
		return usageErr("--heartbeat-max-age must not be negative")
	}
	if th.SuccessUnhealthy > th.SuccessDegraded || th.BacklogDegraded > th.BacklogUnhealthy || th.BlockedDegraded > th.BlockedUnhealthy {
		return usageErr("each unhealthy threshold must be at least as bad as its degraded one")
	}
	return nil
}

func (a *App) printHealth(h *queue.Health) error {
	opt := func(f *float64, format string) string {
		if f == nil {
			return "-"
		}
		return fmt.Sprintf(format, *f)
	}
	hb := "never"
	if h.LastHeartbeat != nil {
		hb = *h.LastHeartbeat
		if a.stdoutIsTerminal() {
			hb = ageOf(hb, a.now())
		}
	}
	rows := [][]string{
		{"status", h.Status},
		{"success_rate", opt(h.SuccessRate, "%.3f")},
		{"backlog", strconv.Itoa(h.Backlog)},
		{"blocked_retry", strconv.Itoa(h.BlockedRetry)},
		{"failed_24h", strconv.Itoa(h.Failed24h)},
		{"avg_duration_seconds", opt(h.AvgDurationSeconds, "%.3f")},
		{"last_heartbeat", hb},
	}
	for _, st := range queue.TaskStates {
		rows = append(rows, []string{"tasks." + st, strconv.Itoa(h.States[st])})
	}
	for _, name := range sortedKeys(h.Queues) {
		q := h.Queues[name]
		rows = append(rows, []string{"queue." + name, fmt.Sprintf("backlog=%d running=%d paused=%t concurrency=%d", q.Backlog, q.Running, q.Paused, q.Concurrency)})
	}
	if h.OldestWaiting != nil {
		rows = append(rows, []string{"oldest_waiting", fmt.Sprintf("%s (%s, %.0fs)", h.OldestWaiting.ID, h.OldestWaiting.Queue, h.OldestWaiting.Seconds)})
	}
	for _, w := range h.Warnings {
		rows = append(rows, []string{"warning", w})
	}
	return a.writeTable([]string{"METRIC", "VALUE"}, rows)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writePrometheus writes the health figures in the Prometheus text
// exposition format, for node_exporter's textfile collector.
func writePrometheus(w io.Writer, h *queue.Health) error {
	var set promtext.Set
	for st, n := range h.States {
		set.Labelled("cq_tasks", "Tasks by state.", "state", st, float64(n))
	}
	for name, q := range h.Queues {
		set.Labelled("cq_queue_backlog", "Tasks in todo, by queue.", "queue", name, float64(q.Backlog))
		set.Labelled("cq_queue_running", "Live runs (queued, running, cancelling), by queue.", "queue", name, float64(q.Running))
		p := 0.0
		if q.Paused {
			p = 1
		}
		set.Labelled("cq_queue_paused", "1 if the queue is paused.", "queue", name, p)
	}
	for st, n := range h.RunsFinished {
		set.Labelled("cq_runs_finished", "Runs that ended within the health window ("+h.Window+"), by state.", "state", st, float64(n))
	}
	if h.SuccessRate != nil {
		set.Gauge("cq_success_ratio", "Succeeded / (succeeded + failed + timeout) runs within the window.", *h.SuccessRate)
	}
	if h.AvgDurationSeconds != nil {
		set.Gauge("cq_run_duration_seconds", "Average run duration within the window.", *h.AvgDurationSeconds)
	}
	set.Gauge("cq_backlog", "Tasks in todo in queues that are not paused.", float64(h.Backlog))
	set.Gauge("cq_blocked_retry", "Tasks blocked waiting for a retry.", float64(h.BlockedRetry))
	oldest := 0.0
	if h.OldestWaiting != nil {
		oldest = h.OldestWaiting.Seconds
	}
	set.Gauge("cq_oldest_waiting_seconds", "How long the task waiting longest in todo has waited (0: none waits).", oldest)
	set.Gauge("cq_waiting_warned", "Tasks in todo for longer than their queue's warn-after.", float64(h.WaitingWarned))
	set.Gauge("cq_warnings", "Warnings in the health verdict (cq health -o json lists them).", float64(len(h.Warnings)))
	hb := 0.0
	if h.LastHeartbeat != nil {
		hb = float64(queue.ParseStoredTime(*h.LastHeartbeat).UnixMilli()) / 1000
	}
	set.Gauge("cq_last_heartbeat_timestamp_seconds", "Unix time of the last maintenance pass (0: never).", hb)
	status := map[string]float64{queue.HealthOK: 0, queue.HealthDegraded: 1, queue.HealthUnhealthy: 2}[h.Status]
	set.Gauge("cq_health_status", healthStatusHelp, status)
	set.Gauge("cq_store_readable", "1 if cq health could read the store.", 1)
	return set.Write(w)
}

const healthStatusHelp = "Health verdict: 0 ok, 1 degraded, 2 unhealthy, 3 unknown (the store cannot be read)."

// writeUnreadable writes the metrics of a store cq health cannot read:
// the verdict unknown (3, as the exit code of cq health without -o
// prometheus), and cq_store_readable 0 with the reason in its help text,
// since a command that writes its metrics succeeds and says nothing on
// stderr.
func writeUnreadable(w io.Writer, cause error) error {
	var set promtext.Set
	set.Gauge("cq_health_status", healthStatusHelp, 3)
	set.Gauge("cq_store_readable", "1 if cq health could read the store; 0 here: "+oneLine(cause.Error()), 0)
	return set.Write(w)
}
