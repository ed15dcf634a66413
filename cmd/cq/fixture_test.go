package main

// The fixture script command: states and times no command reaches
// without a worker or without waiting, written through the store
// package so that scripts name what they want (a task done 31 days ago,
// a run that failed) and not how one backend stores it.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

const fixtureUsage = `usage: fixture task ID KEY=VALUE... | fixture run RUNID TASKID KEY=VALUE... | fixture schema-version [N]`

// cmdFixture is the fixture command (see script_test.go).
func cmdFixture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf(fixtureUsage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if args[0] == "schema-version" && len(args) <= 2 {
		if err := fixtureSchemaVersion(ctx, ts, args[1:]); err != nil {
			ts.Fatalf("fixture %s: %v", strings.Join(args, " "), err)
		}
		return
	}
	s := fixtureStore(ts)
	defer func() { ts.Check(s.Backend().Close()) }()
	var err error
	switch {
	case args[0] == "task" && len(args) >= 3:
		err = fixtureTask(ctx, s, args[1], fixtureFields(ts, args[2:]))
	case args[0] == "run" && len(args) >= 4:
		err = fixtureRun(ctx, s, args[1], args[2], fixtureFields(ts, args[3:]))
	default:
		ts.Fatalf(fixtureUsage)
	}
	if err != nil {
		ts.Fatalf("fixture %s: %v", strings.Join(args, " "), err)
	}
}

// fixtureStore opens the script's store as cq finds it ($CQ_DB, else
// the home's database), without draining the spool: a fixture must not
// change what a script tests about the spool.
func fixtureStore(ts *testscript.TestScript) *queue.Store {
	if url := fixturePG(ts); url != "" {
		d, err := postgres.Open(context.Background(), url)
		if err != nil {
			ts.Fatalf("fixture: %v", err)
		}
		return queue.New(d.Store())
	}
	d, err := sqlite.Open(context.Background(), fixturePath(ts))
	if err != nil {
		ts.Fatalf("fixture: %v", err)
	}
	return queue.New(d.Store())
}

// fixturePG is the script's PostgreSQL URL; "" when its store is SQLite.
func fixturePG(ts *testscript.TestScript) string {
	a := &App{Getenv: ts.Getenv}
	if url := a.dbURL(); isPostgres(url) {
		return url
	}
	return ""
}

// fixturePath is the script's store as cq resolves it; it must exist.
func fixturePath(ts *testscript.TestScript) string {
	a := &App{Getenv: ts.Getenv}
	path, err := a.dbPath()
	if err != nil {
		ts.Fatalf("fixture: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		ts.Fatalf("fixture: no store yet (run a cq command first): %v", err)
	}
	return path
}

// fixtureFields parses KEY=VALUE arguments; a key given twice fails.
func fixtureFields(ts *testscript.TestScript, args []string) map[string]string {
	f := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			ts.Fatalf("fixture: %q is not KEY=VALUE", a)
		}
		if _, dup := f[k]; dup {
			ts.Fatalf("fixture: %s given twice", k)
		}
		f[k] = v
	}
	return f
}

// fixtureWhen is a time: "now", an offset from now (-31d, -70s, -2h,
// +1h), or an absolute time in the store's format.
func fixtureWhen(now time.Time, v string) (string, error) {
	if v == "now" {
		return queue.FormatTime(now), nil
	}
	if t, err := time.Parse(queue.TimeFormat, v); err == nil {
		return queue.FormatTime(t), nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return "", fmt.Errorf("bad time %q", v)
		}
		return queue.FormatTime(now.Add(time.Duration(days) * 24 * time.Hour)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return "", fmt.Errorf("bad time %q (want now, -31d, -70s or %s)", v, queue.TimeFormat)
	}
	return queue.FormatTime(now.Add(d)), nil
}

var fixtureTerminal = map[string]bool{"done": true, "failed": true, "cancelled": true}

// fixtureTask changes task id:
//
//	state=S            the task's state; a finished one (done, failed,
//	                   cancelled) leaves its key lane and is finished when
//	                   it was last updated, unless finished= says when
//	finished=WHEN      its finish time
//	not_before=WHEN    when it becomes due
//	not_before_why=W   retry or scheduled
//	blocked_reason=R   why it is blocked
func fixtureTask(ctx context.Context, s *queue.Store, id string, f map[string]string) error {
	now := s.Now()
	return s.Backend().Write(ctx, func(tx store.Tx) error {
		t, err := tx.TaskGet(ctx, id)
		if err != nil {
			return fmt.Errorf("no task %q (%w)", id, err)
		}
		// The task keeps its updated_at: a fixture is no transition.
		u := store.TaskUpdate{ID: id, From: t.State, To: t.State, At: t.UpdatedAt,
			NotBefore: t.NotBefore, NotBeforeWhy: t.NotBeforeWhy}
		for k, v := range f {
			switch k {
			case "state":
				u.To = v
				if fixtureTerminal[v] {
					u.Set |= store.SetLaneHead
					if _, ok := f["finished"]; !ok {
						u.Set |= store.SetFinishedAt
						u.FinishedAt = t.UpdatedAt
					}
				}
			case "finished", "not_before":
				when, err := fixtureWhen(now, v)
				if err != nil {
					return err
				}
				if k == "finished" {
					u.Set |= store.SetFinishedAt
					u.FinishedAt = when
				} else {
					u.Set |= store.SetNotBefore
					u.NotBefore = when
				}
			case "not_before_why":
				u.Set |= store.SetNotBefore
				u.NotBeforeWhy = v
			case "blocked_reason":
				u.Set |= store.SetBlockedReason
				u.BlockedReason = v
			default:
				return fmt.Errorf("unknown key %q (state, finished, not_before, not_before_why, blocked_reason)", k)
			}
		}
		if ok, err := tx.TaskUpdate(ctx, u); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("task %q changed meanwhile", id)
		}
		return nil
	})
}

// fixtureRun adds run runID of task taskID:
//
//	attempt=N, state=S   required
//	queue=Q              default: the task's queue
//	worker=W, exit=N, signal=S, error=E
//	created=WHEN         default: when the task was created
//	started=WHEN
//	ended=WHEN           default: when the task finished
func fixtureRun(ctx context.Context, s *queue.Store, runID, taskID string, f map[string]string) error {
	now := s.Now()
	if f["attempt"] == "" || f["state"] == "" {
		return errors.New("attempt= and state= are required")
	}
	return s.Backend().Write(ctx, func(tx store.Tx) error {
		t, err := tx.TaskGet(ctx, taskID)
		if err != nil {
			return fmt.Errorf("no task %q (%w)", taskID, err)
		}
		// What is not given comes from the task: its queue, its creation
		// and its finish.
		r := store.RunView{ID: runID, TaskID: taskID, CreatedAt: t.CreatedAt, EndedAt: t.FinishedAt}
		queueName := t.Queue
		for k, v := range f {
			switch k {
			case "attempt", "exit":
				n, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("bad %s %q", k, v)
				}
				if k == "attempt" {
					r.Attempt = n
				} else {
					r.ExitCode = &n
				}
			case "state":
				r.State = v
			case "queue":
				queueName = v
			case "worker":
				r.Worker = v
			case "signal":
				r.Signal = v
			case "error":
				r.Error = v
			case "created", "started", "ended":
				when, err := fixtureWhen(now, v)
				if err != nil {
					return err
				}
				*map[string]*string{"created": &r.CreatedAt, "started": &r.StartedAt, "ended": &r.EndedAt}[k] = when
			default:
				return fmt.Errorf("unknown key %q (attempt, state, queue, worker, exit, signal, error, created, started, ended)", k)
			}
		}
		fx, ok := tx.(store.Fixtures)
		if !ok {
			return errors.New("this backend has no fixtures")
		}
		return fx.FixtureRunAdd(ctx, r, queueName)
	})
}

// fixtureSchemaVersion sets the store's schema version to N (a store
// from a newer cq), or prints it to stdout. A store at a version this cq
// refuses cannot be opened through the store package, so this one talks
// to the SQLite file itself.
func fixtureSchemaVersion(ctx context.Context, ts *testscript.TestScript, args []string) error {
	if url := fixturePG(ts); url != "" {
		if len(args) == 0 {
			v, err := postgres.SchemaVersion(ctx, url)
			if err != nil {
				return err
			}
			fmt.Fprintln(ts.Stdout(), v)
			return nil
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return fmt.Errorf("bad version %q", args[0])
		}
		return postgres.SetSchemaVersion(ctx, url, n)
	}
	d, err := sql.Open("sqlite3", "file:"+fixturePath(ts)+"?_busy_timeout=10000")
	if err != nil {
		return err
	}
	defer func() { ts.Check(d.Close()) }()
	if len(args) == 0 {
		var v int
		if err := d.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		fmt.Fprintln(ts.Stdout(), v)
		return nil
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("bad version %q", args[0])
	}
	_, err = d.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(n))
	return err
}
