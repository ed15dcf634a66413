package main

// cq schedule: recurring schedules (docs/schedules.md). The slots are
// taken by the maintenance pass (workers, cq heartbeat); these commands
// add, list and change the schedules.

import (
	"fmt"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newScheduleCmd(app *App) *cobra.Command {
	s := newGroupCmd("schedule", "Recurring schedules: a task per slot of a cron expression")
	s.AddCommand(newScheduleAddCmd(app), newScheduleLsCmd(app), newScheduleShowCmd(app), newScheduleRmCmd(app),
		newSchedulePauseCmd(app, true), newSchedulePauseCmd(app, false), newScheduleRunCmd(app))
	return s
}

func newScheduleAddCmd(app *App) *cobra.Command {
	var f specFlags
	var tz, catchUp, overlap string
	var replace bool
	cmd := &cobra.Command{
		Use:   "add NAME SCHEDULE [--tz ZONE] [--catch-up none|last|all] [--overlap skip|queue] [spec flags] (-- CMD ARGS… | --shell STRING | --intent NAME)",
		Short: "Add a schedule: a task per slot of a cron expression",
		Long: `add NAME SCHEDULE [flags] -- CMD ARGS…

SCHEDULE is a five-field cron expression ("*/5 * * * *", "30 2 * * 1-5"),
a descriptor (@hourly, @daily, @weekly, @monthly, @yearly) or "@every D"
(slots at whole multiples of D since 1970-01-01 UTC). Times are those of
--tz (default: this host's zone), daylight-saving changes followed. Each
slot makes one task, id NAME@SLOT (NAME@2026-11-27T10:00:00Z), whatever
the number of workers and hosts. The task spec flags of cq enqueue apply
to every task (--queue, --key, --retries, --timeout, --env, --cwd…).

Adding NAME again with the same definition changes nothing; with
another it is refused (exit 3) unless --replace.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv := commandArgs(cmd, args)
			switch {
			case len(before) < 2:
				return usageErr("schedule add takes a NAME and a SCHEDULE, then the command: cq schedule add NAME \"*/5 * * * *\" -- CMD…")
			case len(before) > 2:
				return usageErr("unexpected arguments %q: quote the schedule (\"*/5 * * * *\") and put the command after --", strings.Join(before[2:], " "))
			case argv == nil && f.shell == "" && f.intent == "":
				return usageErr("empty command: give a command after --, --shell, or --intent")
			case f.okIfActive:
				return usageErr("--ok-if-active is not taken by schedules: --overlap skip skips a slot while its previous task is not finished")
			}
			fs := cmd.Flags()
			if fs.Changed("tz") && tz == "" {
				return usageErr("--tz is empty (leave it out for this host's zone)")
			}
			sp, err := f.spec(fs, argv)
			if err != nil {
				return err
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			d := queue.ScheduleDef{Name: before[0], Expr: before[1], TZ: tz, Spec: sp, CatchUp: catchUp, Overlap: overlap}
			if _, err := st.ScheduleAdd(cmd.Context(), d, replace); err != nil {
				return err
			}
			if app.jsonOut() {
				v, err := st.ScheduleGet(cmd.Context(), d.Name)
				if err != nil {
					return err
				}
				return writeJSON(app.Stdout, v)
			}
			fmt.Fprintln(app.Stdout, d.Name)
			return nil
		},
	}
	f.register(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&tz, "tz", "", "time zone of the schedule, by name (Europe/Berlin, UTC; default: this host's)")
	fl.StringVar(&catchUp, "catch-up", "", "slots missed while nothing ran: none, last (default: the newest) or all")
	fl.StringVar(&overlap, "overlap", "", "a slot while its previous task is not finished: skip (default) or queue behind it")
	fl.BoolVar(&replace, "replace", false, "replace a schedule of this name with another definition")
	return cmd
}

func newScheduleLsCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List schedules with their next slot and their last task",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			list, err := st.ScheduleList(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []queue.Schedule{} // -o json: [] rather than null
			}
			if done, err := printItems(app, list, func(s queue.Schedule) string { return s.Name }); done || err != nil {
				return err
			}
			rows := make([][]string, 0, len(list))
			for _, s := range list {
				rows = append(rows, []string{s.Name, s.Expr, s.TZ, orDash(s.NextSlot), orDash(s.LastSlot), orDash(s.LastTask),
					orDash(s.LastState), pausedWord(s.Paused)})
			}
			return app.writeTable([]string{"NAME", "SCHEDULE", "TZ", "NEXT", "LAST_SLOT", "LAST_TASK", "STATE", "PAUSED"}, rows)
		},
	}
}

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func pausedWord(p bool) string {
	if p {
		return "paused"
	}
	return "no"
}

func newScheduleShowCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule: its definition, next slot and last task",
		Args:  exactArgs(1, "schedule show takes one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			s, err := st.ScheduleGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if app.format() == "json" || app.format() == "jsonl" {
				return writeJSON(app.Stdout, s)
			}
			var what string
			switch {
			case s.Spec.Shell != "":
				what = "shell: " + s.Spec.Shell
			case s.Spec.Intent != "":
				what = "intent: " + s.Spec.Intent
			default:
				what = quoteWords(s.Spec.Cmd)
			}
			rows := [][]string{{"name", s.Name}, {"schedule", s.Expr}, {"tz", s.TZ}, {"command", what}, {"queue", s.Spec.Queue},
				{"catch-up", s.CatchUp}, {"overlap", s.Overlap}, {"paused", pausedWord(s.Paused)}, {"next slot", orDash(s.NextSlot)},
				{"last slot", orDash(s.LastSlot)}, {"last task", orDash(s.LastTask)}, {"last state", orDash(s.LastState)},
				{"created", s.CreatedAt}}
			if s.Spec.Key != "" {
				rows = append(rows, []string{"key", s.Spec.Key})
			}
			if s.Error != nil {
				rows = append(rows, []string{"error", *s.Error})
			}
			for _, r := range rows {
				fmt.Fprintf(app.Stdout, "%-11s %s\n", r[0]+":", r[1])
			}
			return nil
		},
	}
}

func newScheduleRmCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME…",
		Short: "Remove schedules (the tasks they made stay)",
		Args:  minArgs(1, "schedule rm takes schedule names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			return multi(app.Stderr, args, func(name string) error {
				return st.ScheduleRemove(cmd.Context(), name)
			})
		},
	}
}

func newSchedulePauseCmd(app *App, pause bool) *cobra.Command {
	word, short := "pause", "Pause schedules: their slots pass without tasks"
	if !pause {
		word, short = "resume", "Resume paused schedules from their next slot"
	}
	return &cobra.Command{
		Use:   word + " NAME…",
		Short: short,
		Args:  minArgs(1, "schedule "+word+" takes schedule names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			return multi(app.Stderr, args, func(name string) error {
				_, err := st.SchedulePause(cmd.Context(), name, pause)
				return err
			})
		},
	}
}

func newScheduleRunCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "run NAME",
		Short: "Make one task of a schedule now, outside its slots; prints its id",
		Args:  exactArgs(1, "schedule run takes one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			c, err := st.ScheduleRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printCreated(app, []queue.Created{c}, false)
		},
	}
}
