package main

import (
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/cq-dev/cq/cmd/cq/internal/oneproc"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/worker"
	"github.com/lmittmann/tint"
	"github.com/spf13/cobra"
)

func newWorkerCmd(app *App) *cobra.Command {
	var opt worker.Options
	var idleExit, lease, grace, logFormat string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run tasks (one log line per event on stderr: JSON, or text on a terminal)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if oneproc.Saved > 0 {
				runtime.GOMAXPROCS(oneproc.Saved) // runs side by side: every P back (see oneproc)
			}
			survivePipeClose()
			durs := []struct {
				name string
				val  string
				dst  *time.Duration
				min  time.Duration
			}{
				{"idle-exit", idleExit, &opt.IdleExit, 0},
				{"lease", lease, &opt.Lease, 3 * time.Second},
				{"grace", grace, &opt.Grace, 0},
			}
			for _, d := range durs {
				// A flag left out is parsed from its default string, so
				// the documented defaults (--lease 90s, --grace 10s) are
				// the values used; only an empty default means none.
				changed := cmd.Flags().Changed(d.name)
				if !changed && d.val == "" {
					continue
				}
				if d.val == "" {
					// A script's unset variable: --idle-exit "$IDLE" must
					// not become a worker that never exits.
					return usageErr("--%s is empty (leave it out for the default)", d.name)
				}
				v, err := queue.ParseDuration(d.val)
				if err != nil {
					return usageErr("--%s: %v", d.name, err)
				}
				if v < d.min {
					return usageErr("--%s must be at least %v", d.name, d.min)
				}
				*d.dst = v
			}
			switch logFormat {
			case "", "text", "json":
			default:
				return usageErr("--log-format: invalid format %q (want text or json)", logFormat)
			}
			if opt.Concurrency < 1 {
				return usageErr("--concurrency must be 1 or more")
			}
			for _, q := range opt.Queues {
				if !queue.ValidQueueName(q) {
					return usageErr("--queue: invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", q)
				}
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			home, _ := app.Home()
			opt.Home = home
			if sqlite.DBOf(st.Backend()) != nil {
				opt.DBPath = st.Backend().Addr() // watched for writes
				if app.dbURL() != "" {
					opt.DB, _ = filepath.Abs(opt.DBPath)
				}
			} else {
				opt.KeepOutput = true // for cq logs on the other hosts
				opt.DB = app.dbURL()
			}
			if opt.Handlers == "" {
				opt.Handlers = app.Getenv("CQ_HANDLERS")
			}
			if opt.Handlers == "" {
				opt.Handlers = filepath.Join(home, "handlers")
			}
			// Absolute: a run starts in its task's cwd, not the worker's.
			if abs, err := filepath.Abs(opt.Handlers); err == nil {
				opt.Handlers = abs
			}
			if exe, err := os.Executable(); err == nil {
				opt.Executable = exe
			}
			opt.Log = slog.New(app.logHandler(logFormat))
			return worker.New(st, opt).Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opt.Queues, "queue", nil, "only claim from this queue (repeatable; default all)")
	f.IntVarP(&opt.Concurrency, "concurrency", "c", 1, "runs at once")
	f.BoolVar(&opt.Once, "once", false, "exit 0 when nothing is runnable and no run is left")
	f.StringVar(&idleExit, "idle-exit", "", "exit 0 after being idle this long (0: never)")
	f.StringVar(&lease, "lease", "90s", "lease TTL, renewed every TTL/3 (at least 3s)")
	f.StringVar(&grace, "grace", "10s", "on stop or timeout, SIGTERM then SIGKILL after this long")
	f.StringVar(&opt.Handlers, "handlers", "", "intent handlers folder (default $CQ_HANDLERS, <home>/handlers)")
	f.StringVar(&logFormat, "log-format", "", "log as text or json (default: text on a terminal, else json)")
	return cmd
}

// survivePipeClose keeps a process alive when the reader of its stderr
// goes away (cq worker 2>&1 | head): Go kills a program that writes to a
// closed pipe on fd 1 or 2 with SIGPIPE unless it handles the signal.
// With it handled the write fails with EPIPE and the log line is lost,
// rather than the worker in the middle of its runs. Runs get the default
// disposition back (exec resets handled signals).
func survivePipeClose() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// logHandler is the worker log's format: one JSON object per line, which
// scripts and log collectors parse, unless stderr is a terminal (or
// format is "text"); there a person reads it, as short coloured text.
// Colour needs a terminal and no NO_COLOR in the environment
// (no-color.org).
func (a *App) logHandler(format string) slog.Handler {
	tty := a.stderrIsTerminal()
	if format == "json" || (format == "" && !tty) {
		return slog.NewJSONHandler(a.Stderr, nil)
	}
	return tint.NewTextHandler(a.Stderr, &tint.Options{
		TimeFormat: time.TimeOnly,
		NoColor:    !tty || a.Getenv("NO_COLOR") != "",
	})
}
