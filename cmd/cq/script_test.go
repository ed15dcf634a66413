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
// are fixtures written with sql, and say so; a umask is set by running cq
// under `sh -c 'umask 0 && exec cq …'` in its own process, never in the
// test process, where it would be process-wide.
//
// Custom script commands, beside testscript's built-ins:
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
//	    WANT. The input must hold exactly one JSON value, unless -s
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
//	sql DBFILE STATEMENT
//	    Run one SQL statement on the SQLite database DBFILE with a
//	    connection of its own, closed before the command returns; rows
//	    it returns are printed to stdout, one per line, columns separated
//	    by tabs. Used for fixtures (a schema version from the future, a
//	    state no command can reach without a worker) and to look at what
//	    is stored.
//
//	lines N FILE
//	    FILE ("stdout" or "stderr" for the last command's) must have
//	    exactly N lines (N may be 0, unlike grep -count).
//
//	waitlines N FILE
//	    Poll FILE (written by a background command) until it has at least
//	    N complete lines; fail if that takes more than 30 seconds. This is
//	    how scripts wait for a background process, never with a sleep.

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// scriptJQ is the jq flavour of testdata/script and testdata/ops (see
// jqSyntax): every argument before EXPR that starts with "-" is an
// option, and a result JSON cannot encode fails the script.
var scriptJQ = jqSyntax{name: "jq"}

// scriptCmds are the custom commands of testdata/script and testdata/ops.
var scriptCmds = map[string]scriptCmd{
	"status":    cmdExitCode("status"),
	"jq":        scriptJQ.cmdJQ,
	"envout":    scriptJQ.cmdEnvout,
	"mode":      cmdFileMode("mode"),
	"sql":       cmdSQL,
	"lines":     cmdLines,
	"waitlines": cmdWaitlines,
}

func scriptParams(files []string) testscript.Params {
	return testscript.Params{
		Files: files,
		Setup: scriptSetup,
		Cmds:  scriptCmds,
	}
}

func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: sql DBFILE STATEMENT")
	}
	path := ts.MkAbs(args[0])
	if _, err := os.Stat(path); err != nil {
		ts.Fatalf("sql: %v", err)
	}
	d, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	ts.Check(err)
	defer func() { ts.Check(d.Close()) }()
	rows, err := d.Query(args[1])
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

// TestScriptCommands checks that the custom commands above can fail: each
// script below must fail, and the last one, which uses every command the
// way the suites do, must pass.
func TestScriptCommands(t *testing.T) {
	cases := map[string]string{
		"jq_differs":       "exec echo '{\"a\":\"x\"}'\njq .a y\n",
		"jq_neg_same":      "exec echo '{\"a\":\"x\"}'\n! jq .a x\n",
		"jq_quoted_type":   "exec echo '{\"n\":1}'\njq .n '\"1\"'\n",
		"jq_null_string":   "exec echo '{\"k\":\"null\"}'\njq '.k == null' true\n",
		"jq_not_json":      "exec echo 'not json'\njq . x\n",
		"jq_two_values":    "exec printf '{}\\n{}\\n'\njq . '{}'\n",
		"jq_two_results":   "exec echo '[1,2]'\njq '.[]' 1\n",
		"jq_bad_expr":      "exec echo '{}'\n! jq '.[' x\n",
		"jq_slurp":         "exec printf '%s\\n%s\\n' '{\"a\":1}' '{\"a\":2}'\njq -s 'map(.a)' '[2,1]'\n",
		"jq_arg":           "exec echo '{\"a\":\"x\"}'\njq --arg v y '.a == $v' true\n",
		"status_code":      "status 3 sh -c 'exit 4'\n",
		"status_zero":      "status 0 sh -c 'exit 1'\n",
		"status_nonzero":   "status 1 sh -c 'exit 0'\n",
		"lines_count":      "exec echo one\nlines 2 stdout\n",
		"lines_zero":       "exec echo one\nlines 0 stdout\n",
		"mode_differs":     "chmod 0644 f\nmode 0600 f\n-- f --\nx\n",
		"envout_value":     "exec echo ' v1 '\nenvout V\nexec echo $V\nstdout '^v2$'\n",
		"envout_jq_value":  "exec echo '{\"a\":\"x\"}'\nenvout V .a\nexec echo $V\nstdout '^y$'\n",
		"sql_rows_compare": "exec cq enqueue --id t -- true\nsql $CQ_HOME/cq.db 'SELECT id, state FROM tasks'\nstdout '^t\\tinbox$'\n",
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
sql $CQ_HOME/cq.db 'SELECT id, state FROM tasks'
stdout '^t\ttodo$'
jq -in j.json .a 5
-- f --
x
-- nothing --
-- j.json --
{"a":5}
`
	checkScriptCommands(t, scriptParams, cases, pass)
}
