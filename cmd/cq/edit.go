package main

import (
	"fmt"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// registerEdit registers the spec flags cq task set may change: those
// that do not touch the task's place (key lane, dependencies, schedule,
// hold), which have commands of their own or cannot change.
func (f *specFlags) registerEdit(fs *pflag.FlagSet, unset *[]string) {
	fs.StringVar(&f.shell, "shell", "", "run this string with /bin/sh -c instead")
	fs.StringVar(&f.intent, "intent", "", "run the handler NAME from the handlers folder instead")
	fs.StringVar(&f.payload, "payload", "", "JSON payload for the intent")
	fs.StringVar(&f.queue, "queue", "", "move to this queue")
	fs.StringVar(&f.priority, "priority", "", "P0 (first) to P3")
	fs.StringVar(&f.timeout, "timeout", "", "run time limit")
	fs.IntVar(&f.retries, "retries", 0, "retries after a non-zero exit")
	fs.StringArrayVar(&f.env, "env", nil, "K=V to set, or K to copy from here (repeatable; other variables are kept)")
	fs.StringVar(&f.cwd, "cwd", "", "working folder")
	fs.BoolVar(&f.probe, "probe", false, "make it a probe (--probe=false: no longer one)")
	fs.StringVar(&f.key, "key", "", "refused: a task's key lane cannot change")
	fs.BoolVar(&f.unique, "unique", false, "refused: a task's key lane cannot change")
	_ = fs.MarkHidden("key")
	_ = fs.MarkHidden("unique")
	fs.StringArrayVar(unset, "unset-env", nil, "remove the variable K (repeatable)")
}

// overrideSpec applies the spec flags given on the command line, and the
// command after -- (argv, nil when none), over sp, a stored spec: what is
// not given is kept. --env sets variables over the stored ones and
// --unset-env removes some. A new command (after --, --shell or
// --intent) replaces the old one whatever its kind.
func overrideSpec(fs *pflag.FlagSet, f *specFlags, unset []string, argv []string, sp queue.Spec) (queue.Spec, error) {
	raw, err := f.spec(fs, argv)
	if err != nil {
		return sp, err
	}
	if argv != nil || fs.Changed("shell") || fs.Changed("intent") {
		sp.Cmd, sp.Shell, sp.Intent, sp.Payload = raw.Cmd, raw.Shell, raw.Intent, nil
	}
	if fs.Changed("payload") {
		sp.Payload = raw.Payload
	}
	set := func(name string, dst *string, v string) {
		if fs.Changed(name) {
			*dst = v
		}
	}
	set("id", &sp.ID, raw.ID)
	set("queue", &sp.Queue, raw.Queue)
	set("priority", &sp.Priority, raw.Priority)
	set("timeout", &sp.Timeout, raw.Timeout)
	set("cwd", &sp.Cwd, raw.Cwd)
	set("key", &sp.Key, raw.Key)
	if fs.Changed("unique") {
		sp.Unique = raw.Unique
	}
	if fs.Changed("retries") {
		sp.Retries = raw.Retries
	}
	if fs.Changed("after") {
		sp.After = raw.After
	}
	if fs.Changed("delay") || fs.Changed("at") {
		sp.Delay, sp.At = raw.Delay, raw.At
	}
	if fs.Changed("hold") {
		sp.Hold = raw.Hold
	}
	if fs.Changed("probe") {
		sp.Probe = raw.Probe
	}
	for k, v := range raw.Env {
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env[k] = v
	}
	for _, k := range unset {
		if k == "" || strings.Contains(k, "=") {
			return sp, usageErr("--unset-env %q: want a variable's NAME", k)
		}
		delete(sp.Env, k)
	}
	return sp, nil
}

func newTaskSetCmd(app *App) *cobra.Command {
	var f specFlags
	var unset []string
	cmd := &cobra.Command{
		Use:   "set ID [--priority P] [--queue Q] [--timeout D] [--retries N] [--env K=V] [--unset-env K] [--cwd DIR] [--probe] [--shell S | -- CMD ARGS…]",
		Short: "Change a task no worker holds yet (inbox, todo or blocked)",
		Long: `Changes the spec of an inbox, todo or blocked task in one step, recorded
as a task.changed event naming what changed. A task that is doing or has
ended is refused (exit 3). The task keeps its place in its key lane; its
key cannot change. --env sets variables over those the task has,
--unset-env removes one; a new command (after --, --shell or --intent)
replaces the old one. Re-creating the task's id later compares the spec
as changed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv := commandArgs(cmd, args)
			if len(before) != 1 {
				return usageErr("task set takes one task id (put a new command after --)")
			}
			fs := cmd.Flags()
			if fs.Changed("key") || fs.Changed("unique") {
				return usageErr("cannot change the key: a task's place in its key lane is fixed (cq clone ID --key K makes a new task)")
			}
			if !settingGiven(fs) && argv == nil {
				return usageErr("task set: nothing to change (give --priority, --queue, --timeout, --retries, --env, --unset-env, --cwd, --probe, or a command)")
			}
			// The flags are checked before the store is opened: bad
			// input is refused whatever the task.
			if _, err := overrideSpec(fs, &f, unset, argv, queue.Spec{}); err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			id, state, changed, err := st.ChangeTask(ctx, before[0], func(sp queue.Spec) (queue.Spec, error) {
				return overrideSpec(fs, &f, unset, argv, sp)
			})
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				fmt.Fprintln(app.Stdout, id)
			case app.jsonOut():
				if changed == nil {
					changed = []string{}
				}
				return writeJSONLine(app.Stdout, map[string]any{"id": id, "state": state, "changed": changed})
			}
			return nil
		},
	}
	f.registerEdit(cmd.Flags(), &unset)
	return cmd
}

func newCloneCmd(app *App) *cobra.Command {
	var f specFlags
	var unset []string
	cmd := &cobra.Command{
		Use:   "clone ID… [spec flags] [-- CMD ARGS…]",
		Short: "Create and enqueue a new task with the spec of an existing one",
		Long: `Creates and enqueues, for each ID, a new task with that task's spec,
whatever its state (done ones included); the spec flags given override
it, as for cq enqueue, and a command after -- replaces its command.
--env sets variables over the copied ones, --unset-env removes one.
The source's --after is not copied (give --after again to wait for a
task); its key, queue, priority, timeout, retries, environment, folder,
hold, probe mark and schedule are (a --delay counts from the clone's
creation; --probe=false clones a probe as an ordinary task).
Prints the new ids, one per line; --id names the new task when one
task is cloned.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, argv := commandArgs(cmd, args)
			if len(refs) == 0 {
				return usageErr("clone needs at least one task id")
			}
			fs := cmd.Flags()
			if fs.Changed("id") && len(refs) > 1 {
				return usageErr("--id names one new task: clone one task with it")
			}
			if _, err := overrideSpec(fs, &f, unset, argv, queue.Spec{}); err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			return multi(app.Stderr, refs, func(ref string) error {
				_, src, err := st.TaskSpec(ctx, ref)
				if err != nil {
					return err
				}
				src.After = nil
				sp, err := overrideSpec(fs, &f, unset, argv, src)
				if err != nil {
					return err
				}
				if sp, err = sp.Normalize(); err != nil {
					return err
				}
				if err := resolveAfter(ctx, st, &sp); err != nil {
					return err
				}
				res, err := st.Create(ctx, []queue.Spec{sp}, queue.CreateOptions{Enqueue: true})
				if err != nil {
					return createErr(app, err)
				}
				return printCreated(app, res, false)
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringArrayVar(&unset, "unset-env", nil, "do not copy the variable K (repeatable)")
	return cmd
}

// retryDeps is cq retry --deps: each task with the dependents its end
// cancelled, each task's outcome printed as cq retry prints it.
func retryDeps(cmd *cobra.Command, app *App, refs []string, reason string) error {
	st, err := app.Store(cmd.Context())
	if err != nil {
		return err
	}
	return multi(app.Stderr, refs, func(ref string) error {
		out, err := st.RetryWithDependents(cmd.Context(), ref, reason)
		if err != nil {
			return err
		}
		for _, o := range out {
			if err := app.printOutcome(o.ID, o.State); err != nil {
				return err
			}
		}
		return nil
	})
}
