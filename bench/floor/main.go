// Command floor measures, with none of cq's code, the least work cq's
// contract allows, for the goals bench/goals.sh marks "MISS (floor too)"
// when the floor misses as well:
//
//	floor insert DB     a Go binary linking cobra and go-sqlite3 (as cq
//	                    does) that opens a WAL database and commits one
//	                    row: the floor of one cq enqueue, and with the
//	                    stamp command's start, of enqueue to start
//	floor backlog DIR N a store in DIR with N `true` tasks waiting
//	floor run DIR       runs them, 4 at a time, with only the work cq's
//	                    contract requires of each (three recorded
//	                    transitions, a run folder, a spawn; see run.go):
//	                    the end-to-end floor; prints how many it ran
//
// and one probe of the disk, which bench/run.sh waits on before the
// end-to-end part and bench/e2e.sh prints:
//
//	floor files DIR N   N run folders made as cq's worker makes them
//	                    (mkdir, stdout.log, stderr.log, summary.json);
//	                    prints the microseconds per run
package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{Use: "floor", SilenceUsage: true}
	root.AddCommand(&cobra.Command{
		Use:  "insert DB",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			db, err := sql.Open("sqlite3", "file:"+args[0]+"?_busy_timeout=30000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate")
			if err != nil {
				return err
			}
			if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
				return err
			}
			_, err = db.Exec(`INSERT INTO t (v) VALUES ('true')`)
			return err
		},
	}, &cobra.Command{
		Use:  "files DIR N",
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return errors.New("the run count must be a positive number")
			}
			summary := make([]byte, 600)
			start := time.Now()
			for i := range n {
				d := filepath.Join(args[0], fmt.Sprintf("run%06d", i))
				if err := os.Mkdir(d, 0o700); err != nil {
					return err
				}
				for _, name := range []string{"stdout.log", "stderr.log", "summary.json"} {
					f, err := os.OpenFile(filepath.Join(d, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
					if err != nil {
						return err
					}
					if name == "summary.json" {
						_, _ = f.Write(summary)
					}
					f.Close()
				}
			}
			fmt.Printf("%.0f\n", float64(time.Since(start).Microseconds())/float64(n))
			return nil
		},
	})
	root.AddCommand(runCmds()...)
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
