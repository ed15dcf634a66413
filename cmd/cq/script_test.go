package main

// TestScripts runs the .txtar scripts in testdata/script against the real
// cq binary (TestMain puts this test binary in $PATH as "cq"). Every
// script gets a fresh $WORK with CQ_HOME=$WORK/home, HOME=$WORK and TZ=UTC.
// Scripts named bugs_*.txtar assert SPEC behaviour the binary lacks; they
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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itchyny/gojq"
	_ "github.com/mattn/go-sqlite3"
	"github.com/rogpeppe/go-internal/testscript"
)

// bugsPrefix marks scripts that assert SPEC behaviour the binary does not
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
// SPEC.md, which fail until the binary is fixed.
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

func scriptParams(files []string) testscript.Params {
	return testscript.Params{
		Files: files,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("CQ_HOME", filepath.Join(env.WorkDir, "home"))
			env.Setenv("TZ", "UTC")
			// A binary built with -race sleeps a second at exit by
			// default; cq runs hundreds of times here.
			if g := env.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
				env.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":    cmdStatus,
			"jq":        cmdJQ,
			"envout":    cmdEnvout,
			"mode":      cmdMode,
			"sql":       cmdSQL,
			"lines":     cmdLines,
			"waitlines": cmdWaitlines,
		},
	}
}

func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("status does not support !")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: status CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("status: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// jqArgs is a parsed jq command line.
type jqArgs struct {
	slurp  bool
	in     string
	names  []string
	values []any
	expr   string
	want   string
}

func parseJQArgs(ts *testscript.TestScript, args []string, needWant bool) jqArgs {
	var a jqArgs
	a.in = "stdout"
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-s":
			a.slurp = true
			args = args[1:]
		case "-in":
			if len(args) < 2 {
				ts.Fatalf("jq: -in needs a file")
			}
			a.in, args = args[1], args[2:]
		case "--arg":
			if len(args) < 3 {
				ts.Fatalf("jq: --arg needs a name and a value")
			}
			a.names = append(a.names, "$"+args[1])
			a.values = append(a.values, args[2])
			args = args[3:]
		default:
			ts.Fatalf("jq: unknown option %q", args[0])
		}
	}
	n := 1
	if needWant {
		n = 2
	}
	if len(args) != n {
		ts.Fatalf("usage: jq [-s] [-in FILE] [--arg NAME VALUE]... EXPR WANT")
	}
	a.expr = args[0]
	if needWant {
		a.want = args[1]
	}
	return a
}

// jqEval evaluates a.expr on its input and returns the one result.
func jqEval(ts *testscript.TestScript, a jqArgs) any {
	text := ts.ReadFile(a.in)
	var values []any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		if err != nil {
			ts.Fatalf("jq: %s is not JSON: %v\n%s", a.in, err, text)
		}
		values = append(values, normalizeNumbers(v))
	}
	var input any
	switch {
	case a.slurp:
		if values == nil {
			values = []any{}
		}
		input = values
	case len(values) == 1:
		input = values[0]
	default:
		ts.Fatalf("jq: %s holds %d JSON values, want exactly 1 (use -s for JSONL)", a.in, len(values))
	}
	q, err := gojq.Parse(a.expr)
	if err != nil {
		ts.Fatalf("jq: parse %q: %v", a.expr, err)
	}
	code, err := gojq.Compile(q, gojq.WithVariables(a.names))
	if err != nil {
		ts.Fatalf("jq: compile %q: %v", a.expr, err)
	}
	iter := code.Run(input, a.values...)
	var results []any
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, ok := v.(error); ok {
			ts.Fatalf("jq: %q: %v", a.expr, err)
		}
		results = append(results, v)
	}
	if len(results) != 1 {
		ts.Fatalf("jq: %q yields %d results, want exactly 1", a.expr, len(results))
	}
	return results[0]
}

// normalizeNumbers turns json.Numbers into the int or float64 gojq
// works with.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

// render is the jq command's text form of a result: strings unquoted
// unless quoted is set, anything else compact JSON.
func render(ts *testscript.TestScript, v any, quoted bool) string {
	if s, ok := v.(string); ok && !quoted {
		return s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		ts.Fatalf("jq: cannot render %v: %v", v, err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func cmdJQ(ts *testscript.TestScript, neg bool, args []string) {
	a := parseJQArgs(ts, args, true)
	got := render(ts, jqEval(ts, a), strings.HasPrefix(a.want, `"`))
	switch {
	case neg && got == a.want:
		ts.Fatalf("jq %s: got %s, want anything else", a.expr, got)
	case !neg && got != a.want:
		ts.Fatalf("jq %s: got %s, want %s", a.expr, got, a.want)
	}
}

func cmdEnvout(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: envout NAME [[-s] [-in FILE] [--arg NAME VALUE]... EXPR]")
	}
	if len(args) == 1 {
		ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
		return
	}
	a := parseJQArgs(ts, args[1:], false)
	ts.Setenv(args[0], render(ts, jqEval(ts, a), false))
}

func cmdMode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: mode PERM FILE...")
	}
	want, err := strconv.ParseUint(args[0], 8, 32)
	if err != nil {
		ts.Fatalf("mode: bad permission %q", args[0])
	}
	for _, f := range args[1:] {
		st, err := os.Stat(ts.MkAbs(f))
		ts.Check(err)
		if got := st.Mode().Perm(); got != os.FileMode(want) {
			ts.Fatalf("%s has mode %04o, want %04o", f, got, want)
		}
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
	dir := t.TempDir()
	var files []string
	for name, script := range cases {
		f := filepath.Join(dir, name+".txtar")
		if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	okFile := filepath.Join(dir, "pass.txtar")
	if err := os.WriteFile(okFile, []byte(pass), 0o600); err != nil {
		t.Fatal(err)
	}
	files = append(files, okFile)
	rec := &recordT{failed: map[string]bool{}}
	testscript.RunT(rec, scriptParams(files))
	for name := range cases {
		if !rec.failed[name] {
			t.Errorf("script %s passed, want a failure", name)
		}
	}
	if rec.failed["pass"] {
		t.Errorf("script pass failed:\n%s", rec.logs["pass"])
	}
}

// recordT is a testscript.T that records which scripts failed instead of
// failing the test.
type recordT struct {
	mu     sync.Mutex
	name   string
	parent *recordT
	failed map[string]bool
	logs   map[string]string
	log    strings.Builder
}

func (r *recordT) Skip(args ...any) { runtime.Goexit() }
func (r *recordT) Fatal(args ...any) {
	r.Log(args...)
	r.FailNow()
}
func (r *recordT) Parallel()     {}
func (r *recordT) Verbose() bool { return false }
func (r *recordT) Log(args ...any) {
	fmt.Fprintln(&r.log, args...)
}

func (r *recordT) FailNow() {
	root := r.parent
	if root == nil {
		root = r
	}
	root.mu.Lock()
	root.failed[r.name] = true
	root.mu.Unlock()
	runtime.Goexit()
}

func (r *recordT) Run(name string, f func(testscript.T)) {
	sub := &recordT{name: name, parent: r}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(sub)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs == nil {
		r.logs = map[string]string{}
	}
	r.logs[name] = sub.log.String()
}
