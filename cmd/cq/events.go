package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/queue"

	"github.com/spf13/cobra"
)

// followPoll is how often --follow looks for new events.
const followPoll = 100 * time.Millisecond

func newEventsCmd(app *App) *cobra.Command {
	var since int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the event log as JSONL (--since SEQ, --follow; -o table for a table)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return usageErr("--since must be 0 or more")
			}
			table := app.Output == "table" && !app.Quiet
			if table && follow {
				// A table is drawn once every row is known; a stream has no end.
				return usageErr("-o table cannot --follow: use -o jsonl to stream events")
			}
			ctx := cmd.Context()
			st, err := app.ReadStore(ctx)
			if err != nil {
				return err
			}
			if follow && !cmd.Flags().Changed("since") {
				if since, err = st.LastSeq(ctx); err != nil {
					return err
				}
			}
			if table {
				return app.eventsTable(cmd, st, since)
			}
			w := bufio.NewWriter(app.Stdout)
			emit := func(e queue.Event) error {
				var err error
				if app.Quiet {
					// -q: an event's id is its seq.
					_, err = fmt.Fprintln(w, e.Seq)
				} else {
					err = writeJSONLine(w, e)
				}
				if err == nil && follow {
					// Flushed per line so a consumer sees each event at once.
					err = w.Flush()
				}
				return err
			}
			return followEvents(ctx, st, since, follow, emit, w.Flush, func() error {
				if outputGone(app.Stdout) {
					return errOutputGone
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64Var(&since, "since", 0, "print events with seq greater than SEQ")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep streaming new events")
	return cmd
}

// eventsPage is how many events one read of the log returns at most.
const eventsPage = 1000

// followEvents is the loop of cq events and of GET /events (serve_events.go):
// it passes each event with seq > since to emit, in seq order, reading the
// log a page at a time, and calls flush once it has passed the last event
// there is. Without follow it then returns; with follow it looks again
// every followPoll, calling idle before each look (an error of idle ends
// it), until ctx is done, which ends it with nil. A follower restarted
// from the last seq it was given gets every later event once: seqs grow
// in commit order on every backend (docs/store.md).
func followEvents(ctx context.Context, st *queue.Store, since int64, follow bool, emit func(queue.Event) error, flush, idle func() error) error {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		evs, err := st.Events(ctx, since, eventsPage)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range evs {
			if err := emit(e); err != nil {
				return err
			}
			since = e.Seq
		}
		if len(evs) == eventsPage {
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := idle(); err != nil {
			return err
		}
	}
}

// eventsTable prints the events after since as a table: -o table asks
// for one explicitly (without -o the log stays JSONL, as scripts read it).
func (a *App) eventsTable(cmd *cobra.Command, st *queue.Store, since int64) error {
	var rows [][]string
	opt := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	for {
		evs, err := st.Events(cmd.Context(), since, eventsPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			move := ""
			if e.From != nil || e.To != nil {
				move = opt(e.From) + "→" + opt(e.To)
			}
			rows = append(rows, []string{strconv.FormatInt(e.Seq, 10), e.At, e.Kind, opt(e.TaskID), opt(e.RunID), move, opt(e.Reason)})
			since = e.Seq
		}
		if len(evs) < eventsPage {
			break
		}
	}
	return a.writeTable([]string{"SEQ", "AT", "KIND", "TASK", "RUN", "FROM→TO", "REASON"}, rows)
}
