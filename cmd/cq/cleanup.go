package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newCleanupCmd(app *App) *cobra.Command {
	var done, cancelled, failed string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete finished tasks past retention, with their runs, events and logs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := queue.DefaultRetention()
			for _, d := range []struct {
				name, val string
				dst       *int64
			}{{"done", done, (*int64)(&r.Done)}, {"cancelled", cancelled, (*int64)(&r.Cancelled)}, {"failed", failed, (*int64)(&r.Failed)}} {
				v, err := queue.ParseDuration(d.val)
				if err != nil {
					return usageErr("--%s: %v", d.name, err)
				}
				if v < 0 {
					return usageErr("--%s must not be negative", d.name)
				}
				*d.dst = int64(v)
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			var counts map[string]int
			switch {
			case dryRun && app.Quiet:
				// -q: the ids it would delete, one per line.
				w := bufio.NewWriter(app.Stdout)
				defer w.Flush()
				return st.ExpiredIDs(ctx, r, func(_, id string) error {
					_, err := fmt.Fprintln(w, id)
					return err
				})
			case dryRun:
				counts, err = st.ExpiredCounts(ctx, r)
			default:
				home, _ := app.Home()
				opt := maintenance.CleanupOptions{Retention: r, Home: home}
				if app.Quiet {
					// -q: the ids deleted, one per line, as they go.
					opt.Deleted = func(_ string, ids []string) {
						fmt.Fprintln(app.Stdout, strings.Join(ids, "\n"))
					}
				}
				var bar *progressBar
				if app.stderrIsTerminal() {
					// The bar's total costs a count first, paid only at a
					// terminal.
					expired, err := st.ExpiredCounts(ctx, r)
					if err != nil {
						return err
					}
					if total := sumCounts(expired); total > 0 {
						bar = app.newProgress("deleting", total)
						opt.Progress = func(c map[string]int) { bar.set(sumCounts(c)) }
					}
				}
				counts, err = maintenance.Cleanup(ctx, st, opt)
				bar.finish(err == nil)
			}
			if err != nil || app.Quiet {
				return err
			}
			switch app.format() {
			case "json", "jsonl":
				return writeJSONLine(app.Stdout, map[string]any{"dry_run": dryRun, "counts": counts})
			}
			rows := [][]string{}
			for _, s := range queue.CleanupStates {
				rows = append(rows, []string{s, strconv.Itoa(counts[s])})
			}
			return app.writeTable([]string{"STATE", map[bool]string{true: "WOULD_DELETE", false: "DELETED"}[dryRun]}, rows)
		},
	}
	f := cmd.Flags()
	f.StringVar(&done, "done", "30d", "keep done tasks this long after they finished")
	f.StringVar(&cancelled, "cancelled", "7d", "keep cancelled tasks this long")
	f.StringVar(&failed, "failed", "14d", "keep failed tasks this long")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be deleted (counts per state; with -q the ids); delete nothing")
	return cmd
}

// sumCounts is the number of tasks of cleanup's counts per state.
func sumCounts(c map[string]int) int {
	return c[queue.TaskDone] + c[queue.TaskCancelled] + c[queue.TaskFailed]
}
