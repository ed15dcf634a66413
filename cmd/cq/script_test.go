package main

// TestScripts runs the .txtar scripts in testdata/script against the real
// cq binary (TestMain puts this test binary in $PATH as "cq"). Every
// script gets a fresh $WORK with CQ_HOME=$WORK/home, HOME=$WORK and TZ=UTC.
// Scripts named bugs_*.txtar assert documented behaviour the binary lacks; they
// run in TestScriptBugs instead (see there).
//
// Conventions: a command expected to fail runs under status with its exact
// exit code; every successful `exec cq` is followed by `! stderr .`;
// states that need a worker (doing, done, failed, runs, a retry backoff)
// are written with the fixture command, and say so; a umask is set by running cq
// under `sh -c 'umask 0 && exec cq …'` in its own process, never in the
// test process, where it would be process-wide.
//
// The store is $CQ_TEST_DB when set (see scriptSetup); lines about the
// SQLite file in the home run under [defaultdb], and scripts about that
// file alone (files, store) clear CQ_DB first.
//
// Custom script commands, beside testscript's built-ins, the same for
// testdata/script, testdata/worker and testdata/ops:
//
//	status CODE PROG [ARGS...]
//	    Run PROG like exec and require its exit code to be exactly CODE
//	    (0 included). stdout and stderr are kept for the stdout, stderr,
//	    jq and envout commands that follow, as after exec. Use it for every
//	    failing command, so that exit codes are checked exactly.
//
//	[!] jq [-s] [-in FILE] [--arg NAME VALUE]... EXPR WANT
//	    Evaluate the jq expression EXPR (gojq) on the JSON of the last
//	    command's stdout, or of FILE with -in, and compare the result with
//	    WANT. An argument before EXPR that starts with "-" is an option,
//	    except "-" and one starting with "-.", which is EXPR. The input must hold exactly one JSON value, unless -s
//	    (slurp) is given: then every JSON value of the input (one per line
//	    for JSONL) is put in one array, which is the input, as with jq -s.
//	    EXPR must yield exactly one result, rendered as compact JSON with
//	    sorted object keys, except that a string result is compared
//	    unquoted (like jq -r) unless WANT itself starts with a double
//	    quote: `jq .state todo` and `jq .state '"todo"'` both pass for
//	    "todo", and only the second one checks that it is a string (use
//	    `jq '.key == null' true` where null and "null" must differ).
//	    --arg binds $NAME to the string VALUE, as with jq --arg.
//	    With !, the result must differ from WANT (a bad expression or
//	    input still fails the script).
//
//	envout NAME [[-s] [-in FILE] [--arg NAME VALUE]... EXPR]
//	    Set the environment variable NAME to the last command's stdout,
//	    with surrounding white space trimmed; with EXPR, to the result of
//	    the jq expression EXPR on it (or on FILE; options as for jq),
//	    rendered as for jq above, strings unquoted.
//
//	mode PERM FILE...
//	    Each FILE must have exactly the permission bits PERM (octal, e.g.
//	    0600).
//
//	fixture task ID KEY=VALUE...
//	fixture run RUNID TASKID KEY=VALUE...
//	fixture schema-version [N]
//	    Write what no command reaches without a worker or without
//	    waiting, through the store package: a task's state=, finished=,
//	    not_before=, not_before_why=, blocked_reason=; a run of a task
//	    (attempt=, state=, queue=, worker=, exit=, signal=, error=,
//	    created=, started=, ended=); a schema version from a newer cq
//	    (without N: print it). Times are now, an offset from now (-31d,
//	    -70s) or absolute. The store is the script's ($CQ_DB, else the
//	    home's). See fixture_test.go.
//
//	sql STATEMENT
//	    Run one SQL statement on the script's store (a SQLite file) with
//	    a connection of its own, closed before the command returns; rows
//	    it returns are printed to stdout, one per line, columns separated
//	    by tabs. Only for looking at what no command shows.
//
//	lines N FILE
//	    FILE ("stdout" or "stderr" for the last command's) must have
//	    exactly N lines (N may be 0, unlike grep -count).
//
//	waitlines N FILE
//	    Poll FILE (written by a background command) until it has at least
//	    N complete lines; fail if that takes more than 30 seconds. This is
//	    how scripts wait for a background process, never with a sleep.
//
//	waitstate ID STATE [TIMEOUT]
//	    Poll cq show ID until the task is in STATE; fail at TIMEOUT
//	    (default 30s).
//
//	waitjq ID EXPR WANT [TIMEOUT]
//	    Poll cq show ID -o json until EXPR yields WANT (as for jq).
//
//	waitfile FILE [TIMEOUT]
//	    Poll until FILE exists.
//
//	waitprocs RUNID N [TIMEOUT]
//	    Poll /proc until the live (non-zombie) processes whose environment
//	    holds CQ_RUN_ID=RUNID number at least N, or, for N = 0, none.
//
//	sigbg SIGNAL
//	    Send SIGNAL (TERM, INT, KILL, STOP, CONT) to every background
//	    command started since the last wait (testscript's kill knows only
//	    INT and KILL).

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3"
	"github.com/rogpeppe/go-internal/testscript"
)

// bugsPrefix marks scripts that assert documented behaviour the binary does not
// have yet. They run in TestScriptBugs, apart from TestScripts, so that a
// known deviation does not hide regressions elsewhere; a file moves out of
// bugs_ once its deviation is fixed.
const bugsPrefix = "bugs_"

func TestScripts(t *testing.T) {
	files := scripts(t, false)
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/script")
	}
	testscript.Run(t, scriptParams(files))
}

// TestScriptBugs runs testdata/script/bugs_*.txtar: known deviations from
// the documented behaviour (docs/), which fail until the binary is fixed.
func TestScriptBugs(t *testing.T) {
	files := scripts(t, true)
	if len(files) == 0 {
		t.Skip("no known deviations (no testdata/script/bugs_*.txtar)")
	}
	testscript.Run(t, scriptParams(files))
}

// scripts lists testdata/script/*.txtar, the bugs_ files or all the others.
func scripts(t *testing.T, bugs bool) []string {
	all, err := filepath.Glob(filepath.Join("testdata", "script", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range all {
		if strings.HasPrefix(filepath.Base(f), bugsPrefix) == bugs {
			out = append(out, f)
		}
	}
	return out
}

// scriptCmds are the custom commands of every suite.
var scriptCmds = map[string]scriptCmd{
	"status":    cmdStatus,
	"jq":        scriptJQ.cmdJQ,
	"envout":    scriptJQ.cmdEnvout,
	"mode":      cmdMode,
	"sql":       cmdSQL,
	"fixture":   cmdFixture,
	"lines":     cmdLines,
	"waitlines": cmdWaitlines,
	"waitstate": cmdWaitstate,
	"waitjq":    cmdWaitjq,
	"waitfile":  cmdWaitfile,
	"waitprocs": cmdWaitprocs,
	"sigbg":     cmdSigbg,
}

// waitDefault is the default deadline of the wait commands.
const waitDefault = 30 * time.Second

func scriptParams(files []string) testscript.Params {
	return testscript.Params{
		Files:     files,
		Setup:     scriptSetup,
		Cmds:      scriptCmds,
		Condition: scriptCondition,
	}
}

// scriptCondition knows [defaultdb]: the script's store is cq's default,
// the SQLite file cq.db in the home (no $CQ_TEST_DB), so lines about that
// file hold; and [pg]: the script's store is PostgreSQL, shared by homes
// that stand for hosts.
func scriptCondition(cond string) (bool, error) {
	if cond == "defaultdb" {
		return os.Getenv("CQ_TEST_DB") == "", nil
	}
	if cond == "pg" {
		return os.Getenv("CQ_TEST_DB") == "postgres", nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}

func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sql STATEMENT")
	}
	if url := fixturePG(ts); url != "" {
		pgSQL(ts, url, args[0])
		return
	}
	d, err := sql.Open("sqlite3", "file:"+fixturePath(ts)+"?_busy_timeout=10000")
	ts.Check(err)
	defer func() { ts.Check(d.Close()) }()
	rows, err := d.Query(args[0])
	ts.Check(err)
	defer rows.Close()
	cols, err := rows.Columns()
	ts.Check(err)
	out := ts.Stdout()
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		ts.Check(rows.Scan(ptrs...))
		parts := make([]string, len(cols))
		for i, v := range vals {
			parts[i] = v.String
			if !v.Valid {
				parts[i] = "NULL"
			}
		}
		fmt.Fprintln(out, strings.Join(parts, "\t"))
	}
	ts.Check(rows.Err())
}

func cmdLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: lines N FILE")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("lines: bad count %q", args[0])
	}
	text := ts.ReadFile(args[1])
	got := strings.Count(text, "\n")
	if text != "" && !strings.HasSuffix(text, "\n") {
		got++
	}
	if got != want {
		ts.Fatalf("%s has %d lines, want %d:\n%s", args[1], got, want, text)
	}
}

func cmdWaitlines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitlines N FILE")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("waitlines: bad count %q", args[0])
	}
	path := ts.MkAbs(args[1])
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(path)
		got := bytes.Count(data, []byte("\n"))
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s has %d lines after 30s, want %d:\n%s", args[1], got, want, data)
		}
		<-tick.C
	}
}

// scriptCQ runs cq in the script's environment without touching the
// script's stdout and stderr.
func scriptCQ(ts *testscript.TestScript, args ...string) (string, string, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CQ_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PATH=") &&
			!strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"CQ_HOME", "CQ_DB", "HOME", "PATH", "GORACE", "TZ"} {
		if v := ts.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = env, ts.MkAbs(".")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// waitTimeoutArg parses an optional trailing TIMEOUT.
func waitTimeoutArg(ts *testscript.TestScript, args []string, n int) time.Duration {
	if len(args) <= n {
		return waitDefault
	}
	d, err := time.ParseDuration(args[n])
	if err != nil {
		ts.Fatalf("bad timeout %q", args[n])
	}
	return d
}

// scriptPoll polls cond until it reports true, failing the script with
// its last description at the deadline.
func scriptPoll(ts *testscript.TestScript, timeout time.Duration, what string, cond func() (bool, string)) {
	ok, last, took := poll(timeout, cond)
	if !ok {
		ts.Fatalf("%s: not reached within %v; last seen: %s", what, timeout, last)
	}
	ts.Logf("%s: after %v", what, took.Round(time.Millisecond))
}

func cmdWaitstate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitstate ID STATE [TIMEOUT]")
	}
	waitShow(ts, args[0], jqArgs{expr: ".state"}, args[1], waitTimeoutArg(ts, args, 2))
}

func cmdWaitjq(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 || len(args) > 4 {
		ts.Fatalf("usage: waitjq ID EXPR WANT [TIMEOUT]")
	}
	waitShow(ts, args[0], jqArgs{expr: args[1]}, args[2], waitTimeoutArg(ts, args, 3))
}

func waitShow(ts *testscript.TestScript, id string, a jqArgs, want string, timeout time.Duration) {
	scriptPoll(ts, timeout, fmt.Sprintf("task %s: %s == %s", id, a.expr, want), func() (bool, string) {
		out, errs, err := scriptCQ(ts, "show", "-o", "json", id)
		if err != nil {
			return false, fmt.Sprintf("cq show: %v: %s", err, errs)
		}
		v, err := jqEval(a, out)
		if err != nil {
			return false, err.Error()
		}
		got := scriptJQ.render(ts, v, strings.HasPrefix(want, `"`))
		return got == want, got
	})
}

func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile FILE [TIMEOUT]")
	}
	path := ts.MkAbs(args[0])
	scriptPoll(ts, waitTimeoutArg(ts, args, 1), "file "+args[0], func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, fmt.Sprint(err)
	})
}

func cmdWaitprocs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitprocs RUNID N [TIMEOUT]")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 || args[0] == "" {
		ts.Fatalf("waitprocs: bad arguments %q", args)
	}
	what := fmt.Sprintf("processes of run %s: at least %d", args[0], n)
	if n == 0 {
		what = fmt.Sprintf("processes of run %s: none", args[0])
	}
	scriptPoll(ts, waitTimeoutArg(ts, args, 2), what, func() (bool, string) { return wkProcsReached(args[0], n) })
}

var scriptSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL,
	"STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT,
}

func cmdSigbg(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sigbg SIGNAL")
	}
	sig, ok := scriptSignals[strings.TrimPrefix(args[0], "SIG")]
	if !ok {
		ts.Fatalf("sigbg: unknown signal %q", args[0])
	}
	cmds := ts.BackgroundCmds()
	if len(cmds) == 0 {
		ts.Fatalf("sigbg: no background command")
	}
	for _, c := range cmds {
		if err := c.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			ts.Fatalf("sigbg: %v", err)
		}
	}
}

// TestScriptCommands checks that the custom commands above can fail: each
// script below must fail, and the last one, which uses every command the
// way the suites do, must pass.
func TestScriptCommands(t *testing.T) {
	cases := map[string]string{
		"jq_differs":        "exec echo '{\"a\":\"x\"}'\njq .a y\n",
		"jq_neg_same":       "exec echo '{\"a\":\"x\"}'\n! jq .a x\n",
		"jq_quoted_type":    "exec echo '{\"n\":1}'\njq .n '\"1\"'\n",
		"jq_null_string":    "exec echo '{\"k\":\"null\"}'\njq '.k == null' true\n",
		"jq_not_json":       "exec echo 'not json'\njq . x\n",
		"jq_two_values":     "exec printf '{}\\n{}\\n'\njq . '{}'\n",
		"jq_two_results":    "exec echo '[1,2]'\njq '.[]' 1\n",
		"jq_bad_expr":       "exec echo '{}'\n! jq '.[' x\n",
		"jq_slurp":          "exec printf '%s\\n%s\\n' '{\"a\":1}' '{\"a\":2}'\njq -s 'map(.a)' '[2,1]'\n",
		"jq_arg":            "exec echo '{\"a\":\"x\"}'\njq --arg v y '.a == $v' true\n",
		"status_code":       "status 3 sh -c 'exit 4'\n",
		"status_zero":       "status 0 sh -c 'exit 1'\n",
		"status_nonzero":    "status 1 sh -c 'exit 0'\n",
		"lines_count":       "exec echo one\nlines 2 stdout\n",
		"lines_zero":        "exec echo one\nlines 0 stdout\n",
		"mode_differs":      "chmod 0644 f\nmode 0600 f\n-- f --\nx\n",
		"envout_value":      "exec echo ' v1 '\nenvout V\nexec echo $V\nstdout '^v2$'\n",
		"envout_jq_value":   "exec echo '{\"a\":\"x\"}'\nenvout V .a\nexec echo $V\nstdout '^y$'\n",
		"waitstate_never":   "exec cq enqueue --id t --hold -- true\nwaitstate t todo 300ms\n",
		"waitstate_unknown": "waitstate nosuch todo 300ms\n",
		"waitjq_never":      "exec cq enqueue --id t -- true\nwaitjq t .attempts 1 300ms\n",
		"waitfile_missing":  "waitfile nope 200ms\n",
		"waitprocs_none":    "waitprocs no-such-run 1 200ms\n",
		"waitprocs_alive":   "exec env CQ_RUN_ID=sc-fake-run sleep 30 &p&\nwaitprocs sc-fake-run 1\nwaitprocs sc-fake-run 0 300ms\n",
		"fixture_no_task":   "exec cq enqueue --id t -- true\nfixture task nosuch state=done\n",
		"fixture_bad_key":   "exec cq enqueue --id t -- true\nfixture task t colour=red\n",
		"fixture_bad_time":  "exec cq enqueue --id t -- true\nfixture task t state=done finished=yesterday\n",
		"fixture_no_store":  "fixture task t state=done\n",
		"fixture_state":     "exec cq enqueue --id t -- true\nfixture task t state=failed\nexec cq show -o json t\njq .state done\n",
		"fixture_run_task":  "exec cq enqueue --id t -- true\nfixture run r1 nosuch attempt=1 state=failed\n",
		"fixture_version":   "exec cq enqueue --id t -- true\nfixture schema-version 99\nfixture schema-version\nstdout '^98$'\n",
		"jq_neg_expr":       "exec echo '{\"n\":1}'\njq -.n 1\n",
		"sql_rows_compare":  "exec cq enqueue --id t -- true\nsql 'SELECT id, state FROM tasks'\nstdout '^t\\tinbox$'\n",
	}
	pass := `exec echo '{"a":"x","n":1,"k":null,"l":[1,"b"]}'
jq .a x
jq .a '"x"'
! jq .a y
jq .n 1
jq .k null
jq '.k == null' true
jq .l '[1,"b"]'
jq --arg v x '.a == $v' true
envout A .a
exec echo $A
stdout '^x$'
exec printf '%s\n%s\n' '{"a":1}' '{"a":2}'
jq -s 'map(.a)' '[1,2]'
lines 2 stdout
status 0 sh -c 'exit 0'
status 4 sh -c 'echo out; echo err >&2; exit 4'
stdout '^out$'
stderr '^err$'
lines 1 stdout
lines 0 nothing
chmod 0640 f
mode 0640 f
exec cq enqueue --id t -- true
sql 'SELECT id, state FROM tasks'
stdout '^t\ttodo$'
jq -in j.json .a 5
jq -in j.json -.a -5
jq -in j.json -s --arg v 5 'map(.a | tostring) | index($v)' 0
waitstate t todo 5s
waitjq t .attempts 0 5s
waitfile f 1s
! exec env CQ_RUN_ID=sc-fake-pass sleep 30 &p&
waitprocs sc-fake-pass 1
sigbg TERM
wait p
waitprocs sc-fake-pass 0 5s
exec cq enqueue --id u -- true
fixture task u state=done finished=-31d
exec cq show -o json u
jq .state done
fixture run ru u attempt=1 state=failed worker=w1 exit=2 started=-70s
exec cq show -o json u
jq '.runs | length' 1
jq .runs[0].exit_code 2
fixture schema-version 99
fixture schema-version
stdout '^99$'
-- f --
x
-- nothing --
-- j.json --
{"a":5}
`
	checkScriptCommands(t, func(files []string) testscript.Params {
		p := wkScriptParams(t)
		p.Files = files
		return p
	}, cases, pass)
}

// pgSQL is cmdSQL on PostgreSQL: the same output, a value per column
// (booleans as 1 and 0, as SQLite keeps them), tab-separated.
func pgSQL(ts *testscript.TestScript, url, stmt string) {
	ctx := context.Background()
	cfg, err := postgres.ParseURL(url)
	ts.Check(err)
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	ts.Check(err)
	defer func() { ts.Check(c.Close(ctx)) }()
	rows, err := c.Query(ctx, stmt)
	ts.Check(err)
	defer rows.Close()
	out := ts.Stdout()
	for rows.Next() {
		vals, err := rows.Values()
		ts.Check(err)
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case bool:
				parts[i] = map[bool]string{true: "1", false: "0"}[v]
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		fmt.Fprintln(out, strings.Join(parts, "\t"))
	}
	ts.Check(rows.Err())
}
