package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

// Runs that talk back (docs/interactive.md): cq ask, answer, asks, send,
// recv and progress. The commands a task runs read its run from
// CQ_RUN_ID, which the worker sets.

// askPoll is how often cq ask and cq recv look again when no change of
// the store is noticed.
const askPoll = time.Second

func (a *App) runID() string { return a.Getenv("CQ_RUN_ID") }

// waitChange calls check after each change of the store (and at least
// every askPoll) until it reports done, ctx ends (its error is returned)
// or deadline passes (nil: never; done false, no error).
func waitChange(ctx context.Context, st *queue.Store, deadline <-chan time.Time, check func() (bool, error)) (bool, error) {
	changed, stopWatch, err := st.Backend().ChangeWatch(ctx)
	if err != nil {
		return false, err
	}
	defer stopWatch()
	fast := time.NewTicker(waitPoll)
	defer fast.Stop()
	last := time.Now()
	for {
		ch, err := changed()
		if err != nil && ctx.Err() != nil {
			return false, ctx.Err()
		}
		if err != nil || ch || time.Since(last) >= askPoll {
			last = time.Now()
			done, err := check()
			if err != nil || done {
				return done, err
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline:
			return false, nil
		case <-fast.C:
		}
	}
}

func newAskCmd(app *App) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "ask QUESTION",
		Short: "From inside a task: ask the operators a question and wait for the answer",
		Long: `Records QUESTION for the run this task is (CQ_RUN_ID) and waits until an
operator answers it with cq answer. cq ls and cq show mark the task as
waiting for an answer; cq asks lists the open questions. The run keeps its
lease while it waits.

The answer's reason, if any, is printed on stdout (-o json: the question as
stored). A --timeout (default 5m; 0: until the run ends), a cancel of the
task, a SIGINT or SIGTERM, and the worker's shutdown all deny the question,
so a run never hangs on one.

Exit codes: 0 approved; 1 denied (the reason on stderr), not run inside a
task, or a bad question; 3 the run is not running.`,
		Args: exactArgs(1, "ask needs the question"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageErr("--timeout must not be negative")
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			q, err := st.Ask(ctx, app.runID(), args[0], timeout)
			if err != nil {
				return err
			}
			var deadline <-chan time.Time
			if timeout > 0 {
				t := time.NewTimer(timeout)
				defer t.Stop()
				deadline = t.C
			}
			_, err = waitChange(ctx, st, deadline, func() (bool, error) {
				cur, err := st.QuestionGet(ctx, q.ID)
				if err != nil {
					return false, err
				}
				q = cur
				return q.State != queue.AskOpen, nil
			})
			if q.State == queue.AskOpen {
				// The deadline, a signal, or a store that failed: the
				// question is denied whatever happened, so that it does
				// not stay open after its asker is gone.
				why := queue.DenyTimeout
				if ctx.Err() != nil {
					why = "interrupted"
				}
				cur, cerr := st.CloseQuestion(context.WithoutCancel(ctx), q.ID, why)
				if cerr != nil {
					return errors.Join(err, cerr)
				}
				q = cur
			} else if err != nil && ctx.Err() == nil {
				return err
			}
			return app.printAnswer(q)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "deny the question after this long (0: wait until the run ends)")
	return cmd
}

// printAnswer prints how question q was answered and exits 1 on a deny.
func (a *App) printAnswer(q *queue.Question) error {
	if a.format() == "json" || a.format() == "jsonl" {
		if err := writeJSONLine(a.Stdout, q); err != nil {
			return err
		}
	} else if q.Reason != nil && q.State == queue.AskApproved {
		fmt.Fprintln(a.Stdout, *q.Reason)
	}
	if q.State == queue.AskApproved {
		return nil
	}
	msg := "denied"
	if q.Reason != nil {
		msg += ": " + *q.Reason
	}
	return &exitErr{code: exitError, msg: msg}
}

func newAnswerCmd(app *App) *cobra.Command {
	var approve, deny bool
	var reason string
	cmd := &cobra.Command{
		Use:   "answer ID --approve|--deny [--reason R]",
		Short: "Answer the open question of a running task",
		Long: `Answers the oldest open question (cq ask) of the task ID names (an id or a
unique prefix), or of run ID. The asking task's cq ask returns: exit 0 on
--approve, 1 on --deny, printing the reason.

Exit codes: 0 answered; 1 neither or both of --approve and --deny; 3 no open
question (never asked, answered already, timed out, or the run ended); 4 no
such task.`,
		Args: exactArgs(1, "answer needs the task (or run) id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if approve == deny {
				return usageErr("give --approve or --deny")
			}
			if err := checkReason(reason); err != nil {
				return err
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			q, err := st.Answer(cmd.Context(), args[0], approve, reason)
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				fmt.Fprintln(app.Stdout, q.TaskID)
			case app.format() == "json" || app.format() == "jsonl":
				return writeJSONLine(app.Stdout, q)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&approve, "approve", false, "approve: cq ask exits 0")
	cmd.Flags().BoolVar(&deny, "deny", false, "deny: cq ask exits 1")
	cmd.Flags().StringVar(&reason, "reason", "", "the reason, printed by cq ask and recorded in the event")
	return cmd
}

func newAsksCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "asks",
		Short: "List the open questions of running tasks",
		Long: `Lists the questions (cq ask) of running tasks that wait for an answer,
oldest first; answer them with cq answer ID --approve|--deny.`,
		Args: exactArgs(0, "asks takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			qs, err := st.OpenQuestions(cmd.Context())
			if err != nil {
				return err
			}
			if done, err := printItems(app, qs, func(q *queue.Question) string { return q.TaskID }); done {
				return err
			}
			rows := make([][]string, 0, len(qs))
			for _, q := range qs {
				rows = append(rows, []string{q.TaskID, q.RunID, q.AskedAt, deref(q.ExpiresAt), q.Question})
			}
			return app.writeTable([]string{"TASK", "RUN", "ASKED", "EXPIRES", "QUESTION"}, rows)
		},
	}
}

func newSendCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "send ID MESSAGE…",
		Short: "Queue a message for a running task (it reads it with cq recv)",
		Long: `Queues MESSAGE (the words after ID, joined by spaces; one line, at most
64 KiB) for the running task ID. The task reads its messages with cq recv,
each once, in the order sent. A message the run does not read before it
ends waits for the task's next attempt, if there is one.

Exit codes: 0 queued; 1 an empty or multi-line message; 3 the task is not
running; 4 no such task.`,
		Args: minArgs(2, "send needs the task id and the message"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			id, msgID, err := st.Send(cmd.Context(), args[0], strings.Join(args[1:], " "))
			if err != nil {
				return err
			}
			switch {
			case app.Quiet:
				fmt.Fprintln(app.Stdout, msgID)
			case app.format() == "json" || app.format() == "jsonl":
				return writeJSONLine(app.Stdout, map[string]any{"task_id": id, "message_id": msgID})
			}
			return nil
		},
	}
}

func newRecvCmd(app *App) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "recv [--wait D]",
		Short: "From inside a task: print the messages sent to it (cq send)",
		Long: `Prints the messages sent to this task (cq send) that no run of it has
received yet, one per line, oldest first, and marks them received: each is
printed once. With none pending it prints nothing, at once, or with --wait D
when the first arrives (at most D later). -o jsonl prints each as JSON.

Exit codes: 0 (whether or not a message came); 1 not run inside a task; 3
the run is not running.`,
		Args: exactArgs(0, "recv takes no arguments (it reads the messages of its own task)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return usageErr("--wait must not be negative")
			}
			ctx := cmd.Context()
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			var ms []queue.Message
			take := func() (bool, error) {
				var err error
				ms, err = st.Receive(ctx, app.runID())
				return len(ms) > 0, err
			}
			if got, err := take(); err != nil {
				return err
			} else if !got && wait > 0 {
				t := time.NewTimer(wait)
				defer t.Stop()
				if _, err := waitChange(ctx, st, t.C, take); err != nil {
					if ctx.Err() != nil {
						return silentExit(exitInterrupted)
					}
					return err
				}
			}
			for _, m := range ms {
				if app.format() == "json" || app.format() == "jsonl" {
					if err := writeJSONLine(app.Stdout, m); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(app.Stdout, m.Body)
				}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "with no message pending, wait up to this long for one")
	return cmd
}

func newProgressCmd(app *App) *cobra.Command {
	var done, total string
	cmd := &cobra.Command{
		Use:   "progress [--done N] [--total M] [MESSAGE…]",
		Short: "From inside a task: report its progress",
		Long: `Records this run's progress: N done of M, and a message (the words given,
joined by spaces). cq ls, cq show and cq wait show the latest; a
run.progress event records it, at most four a second per run: a report
sooner than that updates the run's progress at once and its event follows
within about a second (the next report, or a worker), so the latest always
gets one.

Exit codes: 0 recorded; 1 not run inside a task, or bad numbers; 3 the run
is not running.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := countFlag("--done", done)
			if err != nil {
				return err
			}
			m, err := countFlag("--total", total)
			if err != nil {
				return err
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			_, err = st.ReportProgress(cmd.Context(), app.runID(), n, m, strings.Join(args, " "))
			return err
		},
	}
	cmd.Flags().StringVar(&done, "done", "", "how much is done")
	cmd.Flags().StringVar(&total, "total", "", "how much there is in all")
	return cmd
}

// countFlag parses a --done or --total: a whole number, -1 when not given.
func countFlag(name, v string) (int64, error) {
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, usageErr("%s %q: want a whole number, 0 or more", name, v)
	}
	return n, nil
}

// progressText is a run's progress on one line: "3/10 (30%) message".
func progressText(p *queue.Progress) string {
	if p == nil {
		return ""
	}
	var parts []string
	switch {
	case p.Done != nil && p.Total != nil:
		s := fmt.Sprintf("%d/%d", *p.Done, *p.Total)
		if *p.Total > 0 {
			s += fmt.Sprintf(" (%d%%)", *p.Done*100 / *p.Total)
		}
		parts = append(parts, s)
	case p.Done != nil:
		parts = append(parts, strconv.FormatInt(*p.Done, 10)+" done")
	case p.Total != nil:
		parts = append(parts, "of "+strconv.FormatInt(*p.Total, 10))
	}
	if p.Message != nil {
		parts = append(parts, *p.Message)
	}
	return strings.Join(parts, " ")
}
