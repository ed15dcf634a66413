package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newShowCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one task with all its runs, oldest first",
		Args:  exactArgs(1, "show takes one task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			t, err := findAfterDrain(cmd.Context(), app, func() (*queue.Task, error) { return st.Get(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				fmt.Fprintln(app.Stdout, t.ID)
				return nil
			case app.format() == "json":
				return writeJSON(app.Stdout, t)
			case app.format() == "jsonl":
				return writeJSONLine(app.Stdout, t)
			}
			opt := func(s *string) string {
				if s == nil {
					return "-"
				}
				return *s
			}
			after := "-"
			if len(t.After) > 0 {
				after = strings.Join(t.After, ",")
			}
			rows := [][]string{
				{"id", t.ID}, {"state", t.State}, {"queue", t.Queue}, {"key", opt(t.Key)},
				{"priority", t.Priority}, {"attempts", strconv.Itoa(t.Attempts)},
				{"blocked_reason", opt(t.BlockedReason)}, {"not_before", opt(t.NotBefore)},
				{"after", after}, {"hold", strconv.FormatBool(t.Hold)},
				{"command", t.Command()}, {"cwd", opt(t.Cwd)}, {"created_at", t.CreatedAt},
				{"updated_at", t.UpdatedAt}, {"finished_at", opt(t.FinishedAt)}, {"reason", opt(t.Reason)},
			}
			if err := app.writeTable([]string{"FIELD", "VALUE"}, rows); err != nil {
				return err
			}
			if t.Runs == nil || len(*t.Runs) == 0 {
				return nil
			}
			fmt.Fprintln(app.Stdout)
			var runs [][]string
			for _, r := range *t.Runs {
				exit := "-"
				if r.ExitCode != nil {
					exit = strconv.Itoa(*r.ExitCode)
				}
				runs = append(runs, []string{r.ID, strconv.Itoa(r.Attempt), r.State, exit, opt(r.Signal), opt(r.Worker),
					opt(r.StartedAt), opt(r.EndedAt), opt(r.Error)})
			}
			return app.writeTable([]string{"RUN", "ATTEMPT", "STATE", "EXIT", "SIGNAL", "WORKER", "STARTED", "ENDED", "ERROR"}, runs)
		},
	}
}

// exactArgs is cobra.ExactArgs with a clear message.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("%s", msg)
		}
		return nil
	}
}

// minArgs requires at least n arguments.
func minArgs(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErr("%s", msg)
		}
		return nil
	}
}
