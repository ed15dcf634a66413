package main

import (
	"github.com/cq-dev/cq/internal/heartbeat"
	"github.com/spf13/cobra"
)

func newHeartbeatCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "heartbeat",
		Short: "Run one maintenance pass (from cron, every minute)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			home, err := app.Home()
			if err != nil {
				return err
			}
			r, err := heartbeat.Pass(cmd.Context(), st, home)
			if err != nil {
				return err
			}
			if app.format() == "json" || app.format() == "jsonl" {
				return writeJSONLine(app.Stdout, r)
			}
			return nil
		},
	}
}
