package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newLsCmd(app *App) *cobra.Command {
	var f queue.ListFilter
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tasks, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, s := range f.States {
				if !queue.ValidTaskState(s) {
					return usageErr("unknown state %q (want one of %s)", s, strings.Join(queue.TaskStates, ", "))
				}
			}
			if f.Limit < 0 {
				return usageErr("--limit must be 0 (all) or more")
			}
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			tasks, err := st.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			return app.printTasks(tasks)
		},
	}
	cmd.Flags().StringSliceVar(&f.States, "state", nil, "only tasks in this state (repeatable)")
	cmd.Flags().StringVar(&f.Queue, "queue", "", "only tasks of this queue")
	cmd.Flags().StringVar(&f.Key, "key", "", "only tasks with this key")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "at most N tasks (0 = all)")
	return cmd
}

func (a *App) printTasks(tasks []*queue.Task) error {
	if tasks == nil {
		tasks = []*queue.Task{}
	}
	switch {
	case a.Quiet:
		for _, t := range tasks {
			fmt.Fprintln(a.Stdout, t.ID)
		}
		return nil
	case a.format() == "json":
		return writeJSON(a.Stdout, tasks)
	case a.format() == "jsonl":
		for _, t := range tasks {
			if err := writeJSONLine(a.Stdout, t); err != nil {
				return err
			}
		}
		return nil
	}
	rows := make([][]string, 0, len(tasks))
	for _, t := range tasks {
		reason := deref(t.BlockedReason)
		if reason == "" && (t.State == queue.TaskCancelled || t.State == queue.TaskFailed) {
			reason = deref(t.Reason)
		}
		rows = append(rows, []string{t.ID, t.State, t.Queue, deref(t.Key), t.Priority, strconv.Itoa(t.Attempts),
			reason, t.CreatedAt, t.Command()})
	}
	return a.writeTable([]string{"ID", "STATE", "QUEUE", "KEY", "PRI", "ATTEMPTS", "REASON", "CREATED", "COMMAND"}, rows)
}
