package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newStateCmd(app *App) *cobra.Command {
	var f queue.StateFilter
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Print one consistent snapshot (seq, tasks, queues, workers) as JSON",
		Long: `Prints {"seq": N, "tasks": [...], "queues": {...}, "workers": [...]}, all
read in one snapshot of the store: N is the seq of the newest event the
snapshot includes, so cq events --since N --follow continues it with no
event missed or repeated. tasks are as cq ls -o json prints them, newest
first: only those not ended (inbox, todo, blocked, doing) unless --all.
queues maps each queue's name to its entry of cq queue ls -o json;
workers is cq workers -o json.

JSON whatever the terminal (-o jsonl: the same object on one line); -o
table a one-line summary (the seq and the counts); -q the task ids.
--queue Q keeps Q's tasks, Q's entry and the workers that claim from Q;
the events that follow are not filtered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("queue") {
				if err := checkStateQueue(f.Queue, "--queue"); err != nil {
					return err
				}
			}
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				return stateIDs(app.Stdout, st, cmd, f)
			case app.Output == "table":
				// Asked for by name: without -o the snapshot stays JSON,
				// as scripts read it.
				return app.stateTable(cmd, st, f)
			}
			return writeStoreState(cmd.Context(), app.Stdout, app.Output == "jsonl", st, f)
		},
	}
	cmd.Flags().BoolVar(&f.All, "all", false, "every task, those ended (done, failed, cancelled) included")
	cmd.Flags().StringVar(&f.Queue, "queue", "", "only this queue's tasks, entry and workers")
	return cmd
}

// checkStateQueue checks the queue a snapshot is asked for (cq state
// --queue, GET /state?queue=), named by what in the message: given, it
// cannot be empty. Its error is of kind Invalid: bad usage (exit 1) to
// the command line, 400 over HTTP.
func checkStateQueue(q, what string) error {
	if q == "" {
		return &queue.Error{Kind: queue.Invalid, Msg: what + " is empty (leave it out for every queue)"}
	}
	if !queue.ValidQueueName(q) {
		return &queue.Error{Kind: queue.Invalid, Msg: fmt.Sprintf("%s: invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", what, q)}
	}
	return nil
}

// writeStoreState writes the snapshot f selects of st as cq state prints
// it (GET /state too): JSON, or JSON on one line when line.
func writeStoreState(ctx context.Context, out io.Writer, line bool, st *queue.Store, f queue.StateFilter) error {
	return writeState(out, line, func(head func(*queue.State) error, each func(*queue.Task) error) error {
		return st.StateEach(ctx, f, head, each)
	})
}

// stateIDs prints the ids of the snapshot's tasks, one per line.
func stateIDs(out io.Writer, st *queue.Store, cmd *cobra.Command, f queue.StateFilter) error {
	w := bufio.NewWriterSize(out, 64<<10)
	err := st.StateEach(cmd.Context(), f, func(*queue.State) error { return nil }, func(t *queue.Task) error {
		_, err := w.WriteString(t.ID + "\n")
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}

// stateTable prints the snapshot's summary: its seq, its tasks by state
// (a state it did not read, an ended one without --all, is "-"), and how
// many queues and workers it holds.
func (a *App) stateTable(cmd *cobra.Command, st *queue.Store, f queue.StateFilter) error {
	var head *queue.State
	counts := map[string]int{}
	tasks := 0
	err := st.StateEach(cmd.Context(), f, func(h *queue.State) error {
		head = h
		return nil
	}, func(t *queue.Task) error {
		counts[t.State]++
		tasks++
		return nil
	})
	if err != nil {
		return err
	}
	header := []string{"SEQ", "TASKS"}
	row := []string{strconv.FormatInt(head.Seq, 10), strconv.Itoa(tasks)}
	for _, s := range queue.TaskStates {
		header = append(header, strings.ToUpper(s))
		if !f.All && queue.TaskTerminal(s) {
			row = append(row, "-")
		} else {
			row = append(row, strconv.Itoa(counts[s]))
		}
	}
	header = append(header, "QUEUES", "WORKERS")
	row = append(row, strconv.Itoa(len(head.Queues)), strconv.Itoa(len(head.Workers)))
	return a.writeTable(header, [][]string{row})
}

// writeState writes the snapshot read streams (see queue.Store.StateEach)
// as one JSON object, the tasks as they come, and exactly as writeJSON
// (or, for line, writeJSONLine) would write the whole queue.State: a
// store's every task need not be held at once.
func writeState(out io.Writer, line bool, read func(head func(*queue.State) error, each func(*queue.Task) error) error) error {
	w := bufio.NewWriterSize(out, 64<<10)
	// Each value is indented as it would be at its depth in the object:
	// one level for the fields, two for a task.
	nl, ind1, ind2, sep := "\n", "  ", "    ", ": "
	if line {
		nl, ind1, ind2, sep = "", "", "", ":"
	}
	var head *queue.State
	n := 0
	err := read(func(h *queue.State) error {
		head = h
		_, err := fmt.Fprintf(w, "{%s%s\"seq\"%s%d,%s%s\"tasks\"%s[", nl, ind1, sep, h.Seq, nl, ind1, sep)
		return err
	}, func(t *queue.Task) error {
		if n > 0 {
			w.WriteByte(',')
		}
		n++
		w.WriteString(nl + ind2)
		return encodeIndented(w, t, ind2, line)
	})
	if err != nil {
		return err
	}
	if n > 0 {
		w.WriteString(nl + ind1)
	}
	w.WriteString("]," + nl + ind1 + `"queues"` + sep)
	if err := encodeIndented(w, head.Queues, ind1, line); err != nil {
		return err
	}
	w.WriteString("," + nl + ind1 + `"workers"` + sep)
	if err := encodeIndented(w, head.Workers, ind1, line); err != nil {
		return err
	}
	w.WriteString(nl + "}\n")
	return w.Flush()
}

// encodeIndented writes v as writeJSON would at a depth whose lines
// start with prefix (compact, as writeJSONLine, when line), without the
// final newline.
func encodeIndented(w io.Writer, v any, prefix string, line bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if !line {
		enc.SetIndent(prefix, "  ")
	}
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return err
}
