package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newQueueLsCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List queues with their settings, backlog and running count",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			qs, err := st.Queues(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				for _, q := range qs {
					fmt.Fprintln(app.Stdout, q.Name)
				}
				return nil
			case app.format() == "json":
				return writeJSON(app.Stdout, qs)
			case app.format() == "jsonl":
				for _, q := range qs {
					if err := writeJSONLine(app.Stdout, q); err != nil {
						return err
					}
				}
				return nil
			}
			dash := func(s *string) string {
				if s == nil {
					return "-"
				}
				return *s
			}
			var rows [][]string
			for _, q := range qs {
				conc := "unlimited"
				if q.Concurrency > 0 {
					conc = strconv.Itoa(q.Concurrency)
				}
				rows = append(rows, []string{q.Name, strconv.FormatBool(q.Paused), conc, strconv.Itoa(q.Backlog), strconv.Itoa(q.Running),
					strconv.Itoa(q.Retries), q.Backoff, strconv.Itoa(q.TransientRetries), strconv.Itoa(q.TimeoutRetries),
					dash(q.Timeout), q.StartTimeout, q.WarnAfter, strconv.FormatBool(q.TimeoutCountsAsks)})
			}
			return app.writeTable([]string{"QUEUE", "PAUSED", "CONCURRENCY", "BACKLOG", "RUNNING", "RETRIES", "BACKOFF",
				"TRANSIENT_RETRIES", "TIMEOUT_RETRIES", "TIMEOUT", "START_TIMEOUT", "WARN_AFTER", "TIMEOUT_COUNTS_ASKS"}, rows)
		},
	}
}

func newQueueSetCmd(app *App) *cobra.Command {
	var conc, retries, transient, timeoutRetries int
	var backoff, timeout, startTimeout, warnAfter, countsAsks string
	cmd := &cobra.Command{
		Use:   "set QUEUE",
		Short: "Change a queue's settings (they take effect at once)",
		Args:  exactArgs(1, "queue set takes one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var set queue.QueueSettings
			fl := cmd.Flags()
			for _, name := range queueSettingNames {
				if fl.Changed(name) {
					if err := setQueueSetting(&set, name, fl.Lookup(name).Value.String()); err != nil {
						return usageErr("--%s: %v", name, err)
					}
				}
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.SetQueue(cmd.Context(), args[0], set); err != nil {
				return err
			}
			if !settingGiven(fl) && app.stderrIsTerminal() {
				// A bare queue set makes the queue, terminal or not (scripts
				// rely on it); typed at a terminal it is likely a forgotten
				// flag, so a hint says nothing else was set.
				fmt.Fprintf(app.Stderr, "cq: queue %s: nothing to set; it keeps its settings (give --concurrency, --retries, --backoff, --transient-retries, --timeout-retries, --timeout, --start-timeout, --warn-after or --timeout-counts-asks)\n", args[0])
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&conc, "concurrency", 0, "most tasks running at once across all workers (0 = unlimited)")
	f.IntVar(&retries, "retries", 0, "retries after a non-zero exit (default 0)")
	f.StringVar(&backoff, "backoff", "", "base delay before such a retry, doubling (default 30s)")
	f.IntVar(&transient, "transient-retries", 0, "retries after a transient failure (default 3)")
	f.IntVar(&timeoutRetries, "timeout-retries", 0, "retries after a timeout (default 1)")
	f.StringVar(&timeout, "timeout", "", "run time limit of its tasks (0 = none)")
	f.StringVar(&startTimeout, "start-timeout", "", "a claimed run not started within this fails (default 10m)")
	f.StringVar(&warnAfter, "warn-after", "", "warn about a task waiting in todo this long (default 10m)")
	f.StringVar(&countsAsks, "timeout-counts-asks", "", "whether the run time limit counts the time runs wait for answers (cq ask): `true|false` (default false)")
	return cmd
}

func newQueuePauseCmd(app *App, pause bool) *cobra.Command {
	word, short := "pause", "Start nothing new from a queue (running tasks go on)"
	if !pause {
		word, short = "resume", "Let a paused queue start tasks again"
	}
	return &cobra.Command{
		Use:   word + " QUEUE",
		Short: short,
		Args:  exactArgs(1, "queue "+word+" takes one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			return st.SetQueue(cmd.Context(), args[0], queue.QueueSettings{Paused: &pause})
		},
	}
}

func newQueueClearCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "clear QUEUE",
		Short: "Cancel a queue's tasks that are not running",
		Args:  exactArgs(1, "queue clear takes one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			var cancelled func([]string)
			if app.Quiet {
				// -q: the ids cancelled, one per line, as they go.
				cancelled = func(ids []string) { fmt.Fprintln(app.Stdout, strings.Join(ids, "\n")) }
			}
			n, err := maintenance.ClearQueue(cmd.Context(), st, args[0], cancelled)
			if err != nil || app.Quiet {
				return err
			}
			if app.format() == "json" || app.format() == "jsonl" {
				return writeJSONLine(app.Stdout, map[string]any{"queue": args[0], "cancelled": n})
			}
			return nil
		},
	}
}

// queueSettingNames are the settings of cq queue set, by flag name. cq
// serve's POST /queues/{name} takes the same, also with _ for - (the
// names of cq queue ls -o json).
var queueSettingNames = []string{"concurrency", "retries", "backoff", "transient-retries", "timeout-retries",
	"timeout", "start-timeout", "warn-after", "timeout-counts-asks"}

// setQueueSetting sets the setting name (one of queueSettingNames) to
// value, as cq queue set's flag gives it, in set. Its error does not name
// the setting.
func setQueueSetting(set *queue.QueueSettings, name, value string) error {
	whole := func(dst **int) error {
		n, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("%q: want a whole number", value)
		}
		*dst = &n
		return nil
	}
	dur := func(dst **time.Duration) error {
		d, err := queue.ParseDuration(value)
		if err != nil {
			return err
		}
		*dst = &d
		return nil
	}
	switch name {
	case "concurrency":
		return whole(&set.Concurrency)
	case "retries":
		return whole(&set.Retries)
	case "transient-retries":
		return whole(&set.TransientRetries)
	case "timeout-retries":
		return whole(&set.TimeoutRetries)
	case "backoff":
		return dur(&set.Backoff)
	case "timeout":
		return dur(&set.Timeout)
	case "start-timeout":
		return dur(&set.StartTimeout)
	case "warn-after":
		return dur(&set.WarnAfter)
	case "timeout-counts-asks":
		// A string, not a bool flag: a bool flag would read
		// --timeout-counts-asks false as true and a second queue name.
		var v bool
		switch value {
		case "true":
			v = true
		case "false":
		default:
			return fmt.Errorf("%q is neither true nor false", value)
		}
		set.TimeoutCountsAsks = &v
		return nil
	}
	return fmt.Errorf("unknown setting %q", name)
}

// settingGiven reports whether a flag other than the global ones was set.
func settingGiven(fs *pflag.FlagSet) bool {
	given := false
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "home", "db", "output", "quiet":
		default:
			given = true
		}
	})
	return given
}
