package main

import (
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

func newWorkersCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "List the live workers (id, host, pid, queues, concurrency, runs)",
		Long: `A worker counts as live until its lease TTL (cq worker --lease) passes
without a sign of life: a worker killed without a word leaves the list
once that time is over; one that stops cleanly leaves it at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := app.ReadStore(cmd.Context())
			if err != nil {
				return err
			}
			ws, err := st.Workers(cmd.Context())
			if err != nil {
				return err
			}
			return app.printWorkers(ws)
		},
	}
}

var workerHeader = []string{"ID", "HOST", "PID", "QUEUES", "CONC", "RUNS", "STARTED", "LAST SEEN"}

func (a *App) printWorkers(ws []queue.Worker) error {
	if done, err := printItems(a, ws, func(w queue.Worker) string { return w.ID }); done {
		return err
	}
	rows := make([][]string, 0, len(ws))
	for _, w := range ws {
		queues := "all"
		if len(w.Queues) > 0 {
			queues = strings.Join(w.Queues, ",")
		}
		rows = append(rows, []string{w.ID, w.Host, strconv.Itoa(w.PID), queues, strconv.Itoa(w.Concurrency),
			strconv.Itoa(w.Runs), w.StartedAt, w.LastSeen})
	}
	return a.writeTable(workerHeader, rows)
}
