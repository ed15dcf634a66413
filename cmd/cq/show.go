package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"

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
			if app.stdoutIsTerminal() {
				return app.showForTerminal(t)
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
				{"after", after}, {"hold", strconv.FormatBool(t.Hold)}, {"probe", strconv.FormatBool(t.Probe)},
				{"command", t.Command()}, {"cwd", opt(t.Cwd)}, {"created_at", t.CreatedAt},
				{"updated_at", t.UpdatedAt}, {"finished_at", opt(t.FinishedAt)}, {"reason", opt(t.Reason)},
			}
			question, progress := "-", "-"
			if t.Question != nil {
				question = t.Question.Question
			}
			if t.Progress != nil {
				progress = progressText(t.Progress)
			}
			rows = append(rows, []string{"question", question}, []string{"progress", progress})
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

// showForTerminal prints a task for a person: "label  value" lines for
// what the task has (a value too long for the terminal goes on under
// itself), instants with their age, then its runs as a table with each
// one's length.
func (a *App) showForTerminal(t *queue.Task) error {
	now := a.now()
	type field struct{ label, value string }
	var fs []field
	add := func(label, value string) { fs = append(fs, field{label, value}) }
	addOpt := func(label string, v *string) {
		if v != nil && *v != "" {
			add(label, *v)
		}
	}
	when := func(s string) string { return s + " (" + ageOf(s, now) + ")" }

	add("id", t.ID)
	add("state", t.State)
	add("queue", t.Queue)
	add("priority", t.Priority)
	add("attempts", strconv.Itoa(t.Attempts))
	switch {
	case t.Shell != "":
		add("shell", t.Shell)
	case t.Intent != "":
		add("intent", t.Intent)
		if len(t.Payload) > 0 {
			add("payload", string(t.Payload))
		}
	default:
		add("command", t.Command())
	}
	addOpt("cwd", t.Cwd)
	if len(t.Env) > 0 {
		var env []string
		for _, k := range sortedKeys(t.Env) {
			env = append(env, k+"="+t.Env[k])
		}
		add("env", strings.Join(env, "\n"))
	}
	addOpt("timeout", t.Timeout)
	if t.Retries != nil {
		add("retries", strconv.Itoa(*t.Retries))
	}
	if t.Unique {
		add("unique", "yes")
	}
	if t.Hold {
		add("hold", "yes")
	}
	if t.Probe {
		add("probe", "yes: failures are expected, never retried, not counted by cq health")
	}
	addOpt("key", t.Key)
	if len(t.After) > 0 {
		add("after", strings.Join(t.After, " "))
	}
	if q := t.Question; q != nil {
		v := q.Question + "\n(waiting for cq answer since " + when(q.AskedAt)
		if q.ExpiresAt != nil {
			v += ", denied at " + when(*q.ExpiresAt)
		}
		add("question", v+")")
	}
	if t.Progress != nil {
		add("progress", progressText(t.Progress)+" ("+when(t.Progress.At)+")")
	}
	if n := len(t.Questions); n > 0 && (n > 1 || t.Question == nil) {
		var qs []string
		for _, q := range t.Questions {
			line := q.State + ": " + q.Question
			if q.Reason != nil {
				line += " (" + *q.Reason + ")"
			}
			qs = append(qs, line)
		}
		add("questions", strings.Join(qs, "\n"))
	}
	if len(t.Messages) > 0 {
		var ms []string
		for _, m := range t.Messages {
			state := "pending"
			if m.ReceivedAt != nil {
				state = "received"
			}
			ms = append(ms, state+": "+m.Body)
		}
		add("messages", strings.Join(ms, "\n"))
	}
	addOpt("blocked_reason", t.BlockedReason)
	addOpt("reason", t.Reason)
	if t.NotBefore != nil {
		add("not_before", when(*t.NotBefore))
	}
	add("created_at", when(t.CreatedAt))
	add("updated_at", when(t.UpdatedAt))
	if t.FinishedAt != nil {
		add("finished_at", when(*t.FinishedAt))
	}

	labelW := 0
	for _, f := range fs {
		labelW = max(labelW, len(f.label))
	}
	indent := strings.Repeat(" ", labelW+len(columnGap))
	width := a.termWidth()
	w := bufio.NewWriter(a.Stdout)
	for _, f := range fs {
		var lines []string
		for _, l := range strings.Split(f.value, "\n") {
			lines = append(lines, wrapTo(cleanCell(l), width-len(indent))...)
		}
		for i, l := range lines {
			if i == 0 {
				if f.label == "state" && a.colorOn() {
					l = sgr(stateColor[l], l)
				}
				fmt.Fprintf(w, "%-*s%s%s\n", labelW, f.label, columnGap, l)
			} else {
				fmt.Fprintf(w, "%s%s\n", indent, l)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if t.Runs == nil || len(*t.Runs) == 0 {
		return nil
	}
	var runs [][]string
	for _, r := range *t.Runs {
		exit := "-"
		switch {
		case r.ExitCode != nil:
			exit = strconv.Itoa(*r.ExitCode)
		case r.Signal != nil:
			exit = *r.Signal
		}
		dur := "-"
		if start, err := time.Parse(time.RFC3339Nano, deref(r.StartedAt)); err == nil {
			end := now
			if r.EndedAt != nil {
				if e, err := time.Parse(time.RFC3339Nano, *r.EndedAt); err == nil {
					end = e
				}
			}
			dur = humanDuration(end.Sub(start))
		}
		note := deref(r.Error)
		if note == "" {
			note = deref(r.Reason)
		}
		runs = append(runs, []string{r.ID, strconv.Itoa(r.Attempt), r.State, exit, deref(r.Worker),
			deref(r.StartedAt), dur, note})
	}
	fmt.Fprintln(a.Stdout)
	return a.drawTable([]string{"RUN", "ATTEMPT", "STATE", "EXIT", "WORKER", "STARTED", "DURATION", "ERROR"}, runs)
}

// wrapTo splits s into lines of at most w display cells, breaking after
// a space when there is one in the line's second half.
func wrapTo(s string, w int) []string {
	w = max(w, 1)
	var out []string
	for runewidth.StringWidth(s) > w {
		cut := runewidth.Truncate(s, w, "")
		if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
			cut = cut[:i+1]
		}
		if cut == "" {
			// One character wider than the whole line: it goes alone.
			_, size := utf8.DecodeRuneInString(s)
			cut = s[:size]
		}
		out = append(out, strings.TrimRight(cut, " "))
		s = s[len(cut):]
	}
	return append(out, s)
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
