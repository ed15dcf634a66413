package main

import (
	"os"
	"path/filepath"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/maintenance"
	"github.com/spf13/cobra"
)

func newHeartbeatCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "heartbeat",
		Short: "Run one maintenance pass (from cron, every minute)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			home, err := app.Home()
			if err != nil {
				return err
			}
			// Two cron passes never overlap: a second one exits 0 at once,
			// silently (cron mails whatever a job prints).
			lock, err := fsutil.OpenLock(filepath.Join(home, "heartbeat.lock"))
			if err != nil {
				return err
			}
			defer func() { _ = lock.Close() }()
			ok, err := lock.TryLock()
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			// And one pass at a time across the hosts that share the store.
			release, ok, err := st.Backend().Exclusive(cmd.Context(), "heartbeat")
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			defer release()
			host, _ := os.Hostname()
			r, err := maintenance.Pass(cmd.Context(), st, maintenance.Options{Home: home, Host: host, AllWarnings: true})
			if err != nil {
				return err
			}
			// Opening the store drained the spool already: those lines
			// count as this pass's.
			r.Drained += app.drained
			if app.format() == "json" || app.format() == "jsonl" {
				return writeJSONLine(app.Stdout, r)
			}
			return nil
		},
	}
}
