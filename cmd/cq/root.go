package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set by the linker in release builds.
var version = "dev"

// commands builds each top-level command, by name; commandOrder is the
// order help lists them in.
var commands = map[string]func(*App) *cobra.Command{
	"task": func(app *App) *cobra.Command {
		task := newGroupCmd("task", "Create tasks and change their state")
		task.AddCommand(newTaskCreateCmd(app), newTaskSetCmd(app), newSetStateCmd(app))
		return task
	},
	"enqueue": newEnqueueCmd,
	"ls":      newLsCmd,
	"show":    newShowCmd,
	"cancel":  newCancelCmd,
	"retry":   newRetryCmd,
	"clone":   newCloneCmd,
	"hold":    newHoldCmd,
	"release": newReleaseCmd,
	"queue": func(app *App) *cobra.Command {
		q := newGroupCmd("queue", "List and configure queues")
		q.AddCommand(newQueueLsCmd(app), newQueueSetCmd(app), newQueuePauseCmd(app, true), newQueuePauseCmd(app, false), newQueueClearCmd(app))
		return q
	},
	"events":    newEventsCmd,
	"heartbeat": newHeartbeatCmd,
	"worker":    newWorkerCmd,
	"workers":   newWorkersCmd,
	"wait":      newWaitCmd,
	"logs":      newLogsCmd,
	"health":    newHealthCmd,
	"cleanup":   newCleanupCmd,
	"state":     newStateCmd,
	"ask":       newAskCmd,
	"answer":    newAnswerCmd,
	"asks":      newAsksCmd,
	"send":      newSendCmd,
	"recv":      newRecvCmd,
	"progress":  newProgressCmd,
	"serve":     newServeCmd,
	"schedule":  newScheduleCmd,
}

var commandOrder = []string{"task", "enqueue", "ls", "show", "cancel", "retry", "clone", "hold", "release", "queue",
	"events", "heartbeat", "worker", "workers", "wait", "logs", "health", "cleanup", "state",
	"ask", "answer", "asks", "send", "recv", "progress", "serve", "schedule"}

// commandWord is the command a command line names: its first word that is
// neither a global flag nor a global flag's value; "" when it cannot tell
// (the whole tree is built then).
func commandWord(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--home" || a == "--db" || a == "--output" || a == "-o":
			i++ // its value
		case strings.HasPrefix(a, "--home=") || strings.HasPrefix(a, "--db=") || strings.HasPrefix(a, "--output=") ||
			a == "--quiet" || a == "-q":
		case strings.HasPrefix(a, "-o") && len(a) > 2: // -ojson
		case strings.HasPrefix(a, "-"):
			return "" // another flag, or a cluster: let cobra sort it out
		default:
			return a
		}
	}
	return ""
}

func newRoot(app *App, only string) *cobra.Command {
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
			// An empty --home or --db given on purpose is a script's unset
			// variable: taken as left out, the command would use another
			// store than the one meant.
			for _, f := range []struct{ name, val, without string }{
				{"home", app.HomeFlag, "$CQ_HOME or the default"},
				{"db", app.DBFlag, "$CQ_DB or the home's cq.db"},
			} {
				if cmd.Flags().Changed(f.name) && f.val == "" {
					return usageErr("--%s is empty (leave it out for %s)", f.name, f.without)
				}
			}
			switch app.Output {
			case "", "table", "json", "jsonl":
			case "prometheus":
				if cmd.Name() != "health" {
					return usageErr("-o prometheus is only for cq health")
				}
			default:
				return usageErr("-o: invalid output format %q (want table, json or jsonl)", app.Output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%s", flagErrorText(err)) })
	pf := root.PersistentFlags()
	pf.StringVar(&app.HomeFlag, "home", "", "home folder (default $CQ_HOME, $XDG_STATE_HOME/cq, ~/.local/state/cq)")
	pf.StringVar(&app.DBFlag, "db", "", "database URL (default $CQ_DB, sqlite://<home>/cq.db)")
	pf.StringVarP(&app.Output, "output", "o", "", "output format: table, json or jsonl (cq health: also prometheus)")
	pf.BoolVarP(&app.Quiet, "quiet", "q", false, "print ids only, one per line")

	// The command line names one command: only it is built (building them
	// all, with their flags, was a tenth of a cq enqueue's CPU time). Help,
	// completion and anything unusual get the whole tree.
	if build, ok := commands[only]; ok {
		root.AddCommand(build(app))
	} else {
		for _, name := range commandOrder {
			root.AddCommand(commands[name](app))
		}
	}
	if only == "__man" {
		if c := manCommand(app); c != nil {
			root.AddCommand(c)
		}
	}
	for _, c := range root.Commands() {
		c.SilenceUsage, c.SilenceErrors = true, true
		for _, sub := range c.Commands() {
			sub.SilenceUsage, sub.SilenceErrors = true, true
		}
	}
	root.SetHelpCommand(helpCommand())
	root.SetOut(app.Stdout)
	root.SetErr(app.Stderr)
	root.SetIn(app.Stdin)
	return root
}

// execute runs the command line and turns its outcome into an exit code.
func execute(app *App, args []string) int {
	ctx, stop := signalContext()
	defer stop()
	word := commandWord(args)
	root := newRoot(app, word)
	if word == cobra.ShellCompRequestCmd || word == cobra.ShellCompNoDescRequestCmd {
		addCompletions(root, app, args)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	// On its way out: see db.TrimWAL (a running worker's store is left
	// alone; a worker that stops trims like any command).
	if app.store != nil {
		app.store.Backend().Leave(context.WithoutCancel(ctx))
	}
	if err == nil {
		return exitOK
	}
	if app.store != nil {
		// A read that failed because the store is read-only (SQLite may
		// need to write its -shm), or a write outside the transactions
		// that already say so, is told in words, with the store's path.
		err = app.store.Backend().Explain(err)
	}
	// A command cut short by SIGINT or SIGTERM exits as a shell reports a
	// process killed by it (130, 143), with nothing more to say.
	var sc signalCause
	if errors.As(context.Cause(ctx), &sc) {
		var ee *exitErr
		if errors.Is(err, context.Canceled) || (errors.As(err, &ee) && ee.code == exitInterrupted) {
			return 128 + int(sc.sig)
		}
	}
	report(app.Stderr, err)
	return codeOf(err)
}

// signalCause is the cause of the command context's end: a signal.
type signalCause struct{ sig syscall.Signal }

func (c signalCause) Error() string { return "interrupted by " + c.sig.String() }

// signalContext is signal.NotifyContext for SIGINT and SIGTERM that
// remembers which one came.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			if ss, ok := s.(syscall.Signal); ok {
				cancel(signalCause{ss})
			} else {
				cancel(nil)
			}
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		signal.Stop(sigs)
		cancel(nil)
	}
}

// newGroupCmd is a command that only holds subcommands: alone it prints
// its help; followed by a word that names none of them, it is bad usage
// (exit 1), not a silent success.
func newGroupCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q for \"cq %s\" (see cq %s --help)", args[0], use, use)
			}
			return cmd.Help()
		},
	}
}

// flagErrorText is pflag's message for a value it could not parse, without
// the strconv detail: `invalid argument "abc" for "--limit" flag:
// strconv.ParseInt: parsing "abc": invalid syntax` becomes
// `invalid argument "abc" for "--limit" flag: want a whole number`.
func flagErrorText(err error) string {
	msg := err.Error()
	head, detail, ok := strings.Cut(msg, ": strconv.Parse")
	if !ok {
		return msg
	}
	switch {
	case strings.HasSuffix(detail, "value out of range"):
		return head + ": out of range"
	case strings.HasPrefix(detail, "Int"), strings.HasPrefix(detail, "Uint"):
		return head + ": want a whole number"
	case strings.HasPrefix(detail, "Float"):
		return head + ": want a number"
	case strings.HasPrefix(detail, "Bool"):
		return head + ": want true or false"
	}
	return head
}

// helpCommand is cobra's help command, except that an unknown topic is
// bad usage (one line on stderr, exit 1) rather than the whole usage on
// stdout with exit 0.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long: `Help provides help for any command in the application.
Simply type cq help [path to command] for full details.`,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			if cmd == nil {
				cmd = c.Root()
			}
			var names []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() || sub == c {
					if strings.HasPrefix(sub.Name(), toComplete) {
						names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
					}
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if cmd == nil || err != nil || len(rest) > 0 {
				return usageErr("unknown help topic %q (see cq help)", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}
