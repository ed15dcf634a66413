package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newLsCmd(app *App) *cobra.Command {
	var f queue.ListFilter
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tasks, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkListFilter(f); err != nil {
				return err
			}
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			if f.Limit == 0 && (app.Quiet || app.format() != "table" || !app.stdoutIsTerminal()) {
				// Everything, and nothing needs it all at once (a drawn
				// table does, for its widths): stream it.
				return app.streamTasks(cmd.Context(), st, f)
			}
			tasks, err := st.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if err := app.printTasks(tasks); err != nil {
				return err
			}
			return app.noteLeftOut(cmd.Context(), st, f, len(tasks))
		},
	}
	listFlags(cmd.Flags(), &f)
	return cmd
}

// listFlags registers cq ls's filter flags on fs (cq serve reads GET
// /tasks's parameters with them).
func listFlags(fs *pflag.FlagSet, f *queue.ListFilter) {
	fs.StringSliceVar(&f.States, "state", nil, "only tasks in this state (repeatable)")
	fs.StringVar(&f.Queue, "queue", "", "only tasks of this queue")
	fs.StringVar(&f.Key, "key", "", "only tasks with this key")
	fs.IntVar(&f.Limit, "limit", 50, "at most N tasks (0 = all)")
}

// checkListFilter refuses the filter values cq ls refuses (cq serve's
// GET /tasks takes the same).
func checkListFilter(f queue.ListFilter) error {
	for _, s := range f.States {
		if !queue.ValidTaskState(s) {
			return usageErr("--state: unknown state %q (want one of %s)", s, strings.Join(queue.TaskStates, ", "))
		}
	}
	if f.Limit < 0 {
		return usageErr("--limit must be 0 (all) or more")
	}
	if f.Queue != "" && !queue.ValidQueueName(f.Queue) {
		return usageErr("--queue: invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", f.Queue)
	}
	return nil
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
		rows = append(rows, taskRow(t))
	}
	return a.writeTable(taskHeader, rows)
}

// noteLeftOut ends a drawn list that the limit cut short with how many
// matched (docs/commands.md, Global flags and output): counted only then, so that a list that shows
// everything, or one a script reads, costs no second query.
func (a *App) noteLeftOut(ctx context.Context, st *queue.Store, f queue.ListFilter, shown int) error {
	if f.Limit == 0 || shown < f.Limit || a.Quiet || a.format() != "table" || !a.stdoutIsTerminal() {
		return nil
	}
	total, err := st.Count(ctx, f)
	if err != nil || total <= shown {
		return err
	}
	_, err = fmt.Fprintf(a.Stdout, "%d of %d shown; --limit 0 for all\n", shown, total)
	return err
}

var taskHeader = []string{"ID", "STATE", "QUEUE", "KEY", "PRI", "ATTEMPTS", "REASON", "CREATED", "COMMAND"}

// taskRow is a task's line in the ls table.
func taskRow(t *queue.Task) []string {
	reason := deref(t.BlockedReason)
	if reason == "" && (t.State == queue.TaskCancelled || t.State == queue.TaskFailed) {
		reason = deref(t.Reason)
	}
	switch {
	case t.Question != nil:
		reason = "asking: " + t.Question.Question
	case t.Progress != nil:
		reason = progressText(t.Progress)
	}
	return []string{t.ID, t.State, t.Queue, deref(t.Key), t.Priority, strconv.Itoa(t.Attempts),
		reason, t.CreatedAt, t.Command()}
}

// streamTasks prints every task the filter selects as printTasks does
// (ids, a JSON array, JSON lines, or tab-separated lines), one at a time
// as the store yields them, so that memory stays flat however many.
func (a *App) streamTasks(ctx context.Context, st *queue.Store, f queue.ListFilter) error {
	w := bufio.NewWriterSize(a.Stdout, 64<<10)
	var each func(*queue.Task) error
	switch {
	case a.Quiet:
		if err := st.ListIDEach(ctx, f, func(id string) error { _, err := w.WriteString(id + "\n"); return err }); err != nil {
			return err
		}
		return w.Flush()
	case a.format() == "json":
		return streamTaskArray(ctx, st, f, w)
	case a.format() == "jsonl":
		each = func(t *queue.Task) error { return writeJSONLine(w, t) }
	default:
		w.WriteString(strings.Join(taskHeader, "\t") + "\n")
		each = func(t *queue.Task) error { return writeTSVRow(w, taskRow(t)) }
	}
	if err := st.ListEach(ctx, f, each); err != nil {
		return err
	}
	return w.Flush()
}

// streamTaskArray writes every task the filter selects to w as the JSON
// array cq ls -o json prints, one task at a time as the store yields
// them, and flushes w.
func streamTaskArray(ctx context.Context, st *queue.Store, f queue.ListFilter, w *bufio.Writer) error {
	n := 0
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	err := st.ListEach(ctx, f, func(t *queue.Task) error {
		// What writeJSON prints for the whole array, element by
		// element.
		buf.Reset()
		if err := enc.Encode(t); err != nil {
			return err
		}
		sep := ",\n  "
		if n == 0 {
			sep = "[\n  "
		}
		n++
		w.WriteString(sep)
		_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		w.WriteString("[]\n")
	} else {
		w.WriteString("\n]\n")
	}
	return w.Flush()
}
