package main

import (
	"bufio"
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
			tick := time.NewTicker(followPoll)
			defer tick.Stop()
			for {
				evs, err := st.Events(ctx, since, 1000)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				for _, e := range evs {
					if app.Quiet {
						// -q: an event's id is its seq.
						_, err = fmt.Fprintln(w, e.Seq)
					} else {
						err = writeJSONLine(w, e)
					}
					if err != nil {
						return err
					}
					since = e.Seq
					if follow {
						// Flushed per line so a consumer sees each event at once.
						if err := w.Flush(); err != nil {
							return err
						}
					}
				}
				if len(evs) == 1000 {
					continue
				}
				if err := w.Flush(); err != nil {
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
				if outputGone(app.Stdout) {
					return errOutputGone
				}
			}
		},
	}
	cmd.Flags().Int64Var(&since, "since", 0, "print events with seq greater than SEQ")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep streaming new events")
	return cmd
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
		evs, err := st.Events(cmd.Context(), since, 1000)
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
		if len(evs) < 1000 {
			break
		}
	}
	return a.writeTable([]string{"SEQ", "AT", "KIND", "TASK", "RUN", "FROM→TO", "REASON"}, rows)
}
