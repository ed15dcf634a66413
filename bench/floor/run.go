package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// The end-to-end floor: "floor backlog DIR N" stores N `true` tasks, and
// "floor run DIR" runs them, 4 at a time, doing only what cq's contract requires of each task and nothing
// else, in the shape cq's worker has found fastest:
//
//   - three recorded transitions, each a compare-and-set UPDATE of the
//     rows that change plus one event row, committed in WAL mode by one
//     writer that batches whatever is pending into each commit: the claim
//     (a task todo → doing and a new run), the start (the run running,
//     with its pid), the end (the run ended with its exit code, the task
//     done), the next claims riding with the ends;
//   - a run folder per run with stdout.log and stderr.log that the
//     process writes straight into, and summary.json written once its end
//     is committed;
//   - the process started in its own process group, with a parent-death
//     signal, stdin from /dev/null and CQ_TASK_ID, CQ_RUN_ID, CQ_ATTEMPT
//     and CQ_HOME in its environment, and reaped;
//   - a lease (owner, token, expiry) set by the claim, checked by each
//     later write of the run;
//   - one structured line on stderr per start and per end.
//
// It has no supervisor (the contract's "no orphan survives a SIGKILLed
// worker"), no lease renewals, no key lanes, queue limits or pauses, no
// priorities, retries or timeouts, and only the claim index. Its rate is
// thus above that of any tool that keeps the whole contract on this
// machine; bench/e2e.sh runs it beside the spawn reference and cq.
func runCmds() []*cobra.Command {
	return []*cobra.Command{{
		Use:  "backlog DIR N",
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return errors.New("the task count must be a positive number")
			}
			return floorBacklog(args[0], n)
		},
	}, {
		Use:  "run DIR",
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := floorRun(args[0], 4)
			if err != nil {
				return err
			}
			fmt.Println(n)
			return nil
		},
	}}
}

func floorOpen(dir string) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "floor.db")+"?_busy_timeout=30000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// floorBacklog makes DIR's store with N tasks waiting, as cq's batch
// enqueue leaves them.
func floorBacklog(dir string, n int) error {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o700); err != nil {
		return err
	}
	db, err := floorOpen(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(floorSchema); err != nil {
		return err
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	now := stamp()
	for range n {
		if _, err := tx.Exec(`INSERT INTO tasks (state, spec, updated_at) VALUES ('todo', '{"cmd":["true"]}', ?)`, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

const floorSchema = `
CREATE TABLE tasks (id INTEGER PRIMARY KEY, state TEXT NOT NULL, spec TEXT NOT NULL, updated_at TEXT NOT NULL, finished_at TEXT);
CREATE INDEX tasks_todo ON tasks (id) WHERE state = 'todo';
CREATE TABLE runs (id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL, state TEXT NOT NULL, pid INTEGER,
	worker TEXT NOT NULL, token TEXT NOT NULL, lease_expires_at TEXT NOT NULL,
	exit_code INTEGER, created_at TEXT NOT NULL, started_at TEXT, ended_at TEXT);
CREATE TABLE events (seq INTEGER PRIMARY KEY, at TEXT NOT NULL, kind TEXT NOT NULL, task_id INTEGER,
	run_id INTEGER, from_state TEXT, to_state TEXT);
`

// floorJob is one claimed task on its way through a slot.
type floorJob struct {
	task, run int64
	token     string
	dir       string
	pid       int
	code      int
	started   string
	err       error
}

type floorEvent struct {
	j     *floorJob
	ended bool
}

// floorRun runs every task of DIR's backlog, slots at a time, and
// returns how many it ran.
func floorRun(dir string, slots int) (int, error) {
	db, err := floorOpen(dir)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE state = 'todo'`).Scan(&n); err != nil {
		return 0, err
	}
	if err := floorPrepare(db); err != nil {
		return 0, err
	}
	path, err := exec.LookPath("true")
	if err != nil {
		return 0, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()

	environ := os.Environ()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	events := make(chan floorEvent, 2*slots)
	summaries := make(chan *floorJob, n)
	summaryDone := make(chan error)
	go func() {
		var first error
		for j := range summaries {
			body, _ := json.Marshal(map[string]any{"id": j.run, "task_id": j.task, "state": "succeeded", "exit_code": j.code, "started_at": j.started, "pid": j.pid})
			if err := os.WriteFile(filepath.Join(j.dir, "summary.json"), body, 0o600); err != nil && first == nil {
				first = err
			}
		}
		summaryDone <- first
	}()
	slot := func(j *floorJob) {
		j.dir = filepath.Join(dir, "runs", strconv.FormatInt(j.run, 10))
		if j.err = os.Mkdir(j.dir, 0o700); j.err != nil {
			events <- floorEvent{j: j, ended: true}
			return
		}
		var out, errf *os.File
		if out, j.err = os.OpenFile(filepath.Join(j.dir, "stdout.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); j.err == nil {
			errf, j.err = os.OpenFile(filepath.Join(j.dir, "stderr.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		}
		if j.err != nil {
			events <- floorEvent{j: j, ended: true}
			return
		}
		env := append(environ[:len(environ):len(environ)], "CQ_TASK_ID="+strconv.FormatInt(j.task, 10),
			"CQ_RUN_ID="+strconv.FormatInt(j.run, 10), "CQ_ATTEMPT=1", "CQ_HOME="+dir)
		cmd := &exec.Cmd{Path: path, Args: []string{"true"}, Env: env, Stdin: null, Stdout: out, Stderr: errf,
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
		if j.err = cmd.Start(); j.err == nil {
			j.pid, j.started = cmd.Process.Pid, stamp()
			events <- floorEvent{j: j}
			if err := cmd.Wait(); err != nil {
				j.code = cmd.ProcessState.ExitCode()
			}
		}
		out.Close()
		errf.Close()
		events <- floorEvent{j: j, ended: true}
	}

	live, finished := 0, 0
	var starts, ends []*floorJob
	// startDelay as in cq: a start waits this long for an end to ride with.
	const startDelay = 3 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	for finished < n {
		claimN := 0
		if len(ends) > 0 || live == 0 {
			claimN = slots - live
		}
		if len(ends) > 0 || len(starts) > 0 || claimN > 0 {
			claims, err := floorCommit(db, starts, ends, claimN)
			if err != nil {
				return 0, err
			}
			for _, j := range starts {
				log.Info("run.started", "task", j.task, "run", j.run, "pid", j.pid)
			}
			for _, j := range ends {
				if j.err != nil {
					return 0, j.err
				}
				log.Info("run.finished", "task", j.task, "run", j.run, "state", "succeeded", "exit_code", j.code)
				summaries <- j
			}
			finished += len(ends)
			starts, ends = starts[:0], ends[:0]
			if len(claims) == 0 && live == 0 && finished < n {
				return 0, fmt.Errorf("%d tasks finished, none left to claim", finished)
			}
			for _, j := range claims {
				live++
				go slot(j)
			}
		}
		if finished == n {
			break
		}
		// Wait for something to record: an end goes at once with what
		// else is pending; starts alone wait up to startDelay for one.
		timer.Reset(startDelay)
		waiting := true
		for waiting {
			select {
			case e := <-events:
				if e.ended {
					live--
					ends = append(ends, e.j)
					waiting = false
				} else {
					starts = append(starts, e.j)
				}
			case <-timer.C:
				if len(starts) > 0 {
					waiting = false
				}
			}
		}
		timer.Stop()
	drain:
		for {
			select {
			case e := <-events:
				if e.ended {
					live--
					ends = append(ends, e.j)
				} else {
					starts = append(starts, e.j)
				}
			default:
				break drain
			}
		}
	}
	close(summaries)
	if err := <-summaryDone; err != nil {
		return 0, err
	}
	return finished, nil
}

// The statements of floorCommit, prepared by floorPrepare.
const (
	floorEventSQL     = `INSERT INTO events (at, kind, task_id, run_id, from_state, to_state) VALUES (?, ?, ?, ?, ?, ?)`
	floorStartSQL     = `UPDATE runs SET state = 'running', pid = ?, started_at = ? WHERE id = ? AND state = 'queued' AND token = ?`
	floorRunEndSQL    = `UPDATE runs SET state = 'succeeded', exit_code = ?, ended_at = ? WHERE id = ? AND state = 'running' AND token = ?`
	floorTaskEndSQL   = `UPDATE tasks SET state = 'done', updated_at = ?, finished_at = ? WHERE id = ? AND state = 'doing'`
	floorSelectSQL    = `SELECT id FROM tasks WHERE state = 'todo' ORDER BY id LIMIT ?`
	floorTaskClaimSQL = `UPDATE tasks SET state = 'doing', updated_at = ? WHERE id = ? AND state = 'todo'`
	floorRunClaimSQL  = `INSERT INTO runs (task_id, state, worker, token, lease_expires_at, created_at) VALUES (?, 'queued', 'floor', ?, ?, ?)`
)

var floorStmts = map[string]*sql.Stmt{}

func floorPrepare(db *sql.DB) error {
	for _, q := range []string{floorEventSQL, floorStartSQL, floorRunEndSQL, floorTaskEndSQL, floorSelectSQL, floorTaskClaimSQL, floorRunClaimSQL} {
		s, err := db.Prepare(q)
		if err != nil {
			return err
		}
		floorStmts[q] = s
	}
	return nil
}

// floorCommit records starts and ends and claims up to claimN tasks, in
// one transaction: per row that changes, a CAS UPDATE on its state, and
// one event per transition.
func floorCommit(db *sql.DB, starts, ends []*floorJob, claimN int) ([]*floorJob, error) {
	tx, err := db.Begin()
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	// Every statement was prepared once, on the one connection.
	stmt := func(q string) (*sql.Stmt, error) {
		s, ok := floorStmts[q]
		if !ok {
			return nil, errors.New("floor: statement not prepared: " + q)
		}
		return tx.Stmt(s), nil
	}
	exec := func(q string, args ...any) (sql.Result, error) {
		s, err := stmt(q)
		if err != nil {
			return nil, err
		}
		return s.Exec(args...)
	}
	now := stamp()
	event := func(kind string, task, run int64, from, to string) error {
		_, err := exec(floorEventSQL, now, kind, task, run, from, to)
		return err
	}
	cas := func(q string, args ...any) error {
		res, err := exec(q, args...)
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k != 1 {
			return errors.New("floor: a CAS matched no row")
		}
		return nil
	}
	for _, j := range starts {
		if err := cas(floorStartSQL, j.pid, j.started, j.run, j.token); err != nil {
			return nil, err
		}
		if err := event("run.started", j.task, j.run, "queued", "running"); err != nil {
			return nil, err
		}
	}
	for _, j := range ends {
		if j.err != nil {
			return nil, j.err
		}
		if err := cas(floorRunEndSQL, j.code, now, j.run, j.token); err != nil {
			return nil, err
		}
		if err := cas(floorTaskEndSQL, now, now, j.task); err != nil {
			return nil, err
		}
		if err := event("task.done", j.task, j.run, "doing", "done"); err != nil {
			return nil, err
		}
	}
	var claims []*floorJob
	if claimN > 0 {
		sel, err := stmt(floorSelectSQL)
		if err != nil {
			return nil, err
		}
		rows, err := sel.Query(claimN)
		if err != nil {
			return nil, err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if err := cas(floorTaskClaimSQL, now, id); err != nil {
				return nil, err
			}
			token := strconv.FormatInt(time.Now().UnixNano(), 36)
			res, err := exec(floorRunClaimSQL,
				id, token, time.Now().Add(90*time.Second).UTC().Format("2006-01-02T15:04:05.000Z"), now)
			if err != nil {
				return nil, err
			}
			run, _ := res.LastInsertId()
			if err := event("task.claimed", id, run, "todo", "doing"); err != nil {
				return nil, err
			}
			claims = append(claims, &floorJob{task: id, run: run, token: token})
		}
	}
	return claims, tx.Commit()
}

func stamp() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }
