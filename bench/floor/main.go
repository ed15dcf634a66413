// Command floor measures what cq cannot go below on this machine, so the
// goals bench/goals.sh checks can be read against physics:
//
//	floor noop          a Go binary linking cobra and go-sqlite3 (as cq
//	                    does) that exits at once: the start-up floor of
//	                    any cq command
//	floor insert DB     the same binary opening a WAL database and
//	                    committing one row: the floor of one cq enqueue
//	floor files DIR N   N run folders made as cq's worker makes them
//	                    (mkdir, stdout.log, stderr.log, summary.json);
//	                    prints the microseconds per run
//	floor rows DB N     N tasks' worth of rows committed in one
//	                    transaction with no index but the rowid: per
//	                    task one 240-byte row and two 85-byte rows (a
//	                    task and its two events), 256 tasks per INSERT;
//	                    prints tasks per second
//	floor backlog DIR N a store in DIR with N `true` tasks waiting
//	floor run DIR       runs them, 4 at a time, with only the work cq's
//	                    contract requires of each (three recorded
//	                    transitions, a run folder, a spawn; see run.go):
//	                    the end-to-end floor; prints how many it ran
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
		Use:  "noop",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return nil },
	}, &cobra.Command{
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
		Use:  "rows DB N",
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return errors.New("the task count must be a positive number")
			}
			db, err := sql.Open("sqlite3", "file:"+args[0]+"?_busy_timeout=30000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate")
			if err != nil {
				return err
			}
			db.SetMaxOpenConns(1)
			for _, q := range []string{`CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)`,
				`CREATE TABLE IF NOT EXISTS e (id INTEGER PRIMARY KEY, v BLOB)`} {
				if _, err := db.Exec(q); err != nil {
					return err
				}
			}
			const per = 256
			task, event := make([]byte, 240), make([]byte, 85)
			insert := func(table string, rows int) string {
				q := "INSERT INTO " + table + " (v) VALUES (?)"
				for range rows - 1 {
					q += ",(?)"
				}
				return q
			}
			start := time.Now()
			tx, err := db.Begin()
			if err != nil {
				return err
			}
			for done := 0; done < n; done += per {
				k := min(per, n-done)
				targs, eargs := make([]any, k), make([]any, 2*k)
				for i := range targs {
					targs[i] = task
				}
				for i := range eargs {
					eargs[i] = event
				}
				if _, err := tx.Exec(insert("t", k), targs...); err != nil {
					return err
				}
				if _, err := tx.Exec(insert("e", 2*k), eargs...); err != nil {
					return err
				}
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			fmt.Printf("%.0f\n", float64(n)/time.Since(start).Seconds())
			return nil
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
