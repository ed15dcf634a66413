package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set by the linker in release builds.
var version = "dev"

func newRoot(app *App) *cobra.Command {
	root := &cobra.Command{
		Use:   "cq",
		Short: "A durable job queue for shell pipelines, cron jobs, CI and operators",
		Long: `cq stores tasks (commands, or named intents with a JSON payload) in SQLite,
runs them on workers with per-key serial lanes and concurrency limits,
retries them with backoff, keeps their logs and reports health.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch app.Output {
			case "", "table", "json", "jsonl":
			case "prometheus":
				if cmd.Name() != "health" {
					return usageErr("-o prometheus is only for cq health")
				}
			default:
				return usageErr("invalid output format %q (want table, json or jsonl)", app.Output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	pf := root.PersistentFlags()
	pf.StringVar(&app.HomeFlag, "home", "", "home folder (default $CQ_HOME, $XDG_STATE_HOME/cq, ~/.local/state/cq)")
	pf.StringVar(&app.DBFlag, "db", "", "database URL (default $CQ_DB, sqlite://<home>/cq.db)")
	pf.StringVarP(&app.Output, "output", "o", "", "output format: table, json or jsonl")
	pf.BoolVarP(&app.Quiet, "quiet", "q", false, "print ids only, one per line")

	task := &cobra.Command{Use: "task", Short: "Create tasks and change their state"}
	task.AddCommand(newTaskCreateCmd(app), newSetStateCmd(app))
	queueCmd := &cobra.Command{Use: "queue", Short: "List and configure queues"}
	queueCmd.AddCommand(newQueueLsCmd(app), newQueueSetCmd(app), newQueuePauseCmd(app, true), newQueuePauseCmd(app, false), newQueueClearCmd(app))
	root.AddCommand(
		task,
		newEnqueueCmd(app),
		newLsCmd(app),
		newShowCmd(app),
		newCancelCmd(app),
		newRetryCmd(app),
		newHoldCmd(app),
		newReleaseCmd(app),
		queueCmd,
		newEventsCmd(app),
		newHeartbeatCmd(app),
		newWorkerCmd(app),
		newWaitCmd(app),
		newLogsCmd(app),
		newHealthCmd(app),
		newCleanupCmd(app),
	)
	for _, c := range append(root.Commands(), task.Commands()...) {
		c.SilenceUsage, c.SilenceErrors = true, true
	}
	root.SetOut(app.Stdout)
	root.SetErr(app.Stderr)
	root.SetIn(app.Stdin)
	return root
}

// execute runs the command line and turns its outcome into an exit code.
func execute(app *App, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(app)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	report(app.Stderr, err)
	return codeOf(err)
}
