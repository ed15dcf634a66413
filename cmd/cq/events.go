package main

import (
	"bufio"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// followPoll is how often --follow looks for new events.
const followPoll = 100 * time.Millisecond

func newEventsCmd(app *App) *cobra.Command {
	var since int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the event log as JSONL (--since SEQ, --follow)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return usageErr("--since must be 0 or more")
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
