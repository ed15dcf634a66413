package main

// Helpers shared by the test suites of this package: the set-up and the
// custom commands of the testscript suites (script_test.go, one set for
// testdata/script, testdata/worker and testdata/ops),
// the harness that proves those commands can fail, and the environment
// in which the Go tests run cq processes (ops_test.go, worker_test.go,
// race_test.go).

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
	"github.com/itchyny/gojq"
	"github.com/rogpeppe/go-internal/testscript"
)

// ---- testscript: set-up ----

// scriptSetup gives every script HOME=$WORK, CQ_HOME=$WORK/home, TZ=UTC
// and a GORACE that keeps a -race cq from sleeping at exit. The store is
// $CQ_TEST_DB when the test runs with one (so that the same scripts run
// on another database), else cq's default in the home.
func scriptSetup(env *testscript.Env) error {
	env.Setenv("HOME", env.WorkDir)
	env.Setenv("CQ_HOME", filepath.Join(env.WorkDir, "home"))
	db := os.Getenv("CQ_TEST_DB")
	if db == "postgres" {
		// A schema of the script's own on the tests' server.
		server, skip, err := pgtest.Find()
		if err != nil {
			return err
		}
		if skip != "" {
			env.T().Skip(skip)
		}
		url, drop, err := pgtest.NewSchema(context.Background(), server)
		if err != nil {
			return err
		}
		env.Defer(func() { _ = drop(context.Background()) })
		db = url
	}
	env.Setenv("CQ_DB", db)
	env.Setenv("TZ", "UTC")
	env.Setenv("GORACE", noExitSleep(env.Getenv("GORACE")))
	return nil
}

// noExitSleep adds atexit_sleep_ms=0 to a GORACE value that does not set
// it: a binary built with -race sleeps a second at exit by default, and
// the suites run cq hundreds of times.
func noExitSleep(g string) string {
	if strings.Contains(g, "atexit_sleep_ms") {
		return g
	}
	return strings.TrimSpace(g + " atexit_sleep_ms=0")
}

// scriptCmd is a testscript custom command.
type scriptCmd = func(ts *testscript.TestScript, neg bool, args []string)

// ---- testscript: status and mode ----

// cmdStatus is `status CODE PROG [ARGS...]`: run PROG like exec and
// require its exit code to be exactly CODE (0 included).
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

// cmdMode is `mode PERM FILE...`: each FILE must have exactly the
// permission bits PERM (octal).
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

// ---- testscript: jq and envout ----

// jqSyntax is the jq command (and envout, which reads the same
// arguments): an argument before the expression that starts with "-" is
// an option, except "-" itself and one starting with "-.", which is the
// expression (a negation); a result JSON cannot encode fails the script.
type jqSyntax struct {
	// name is the command's name in messages.
	name string
}

// scriptJQ is the jq and envout of every suite.
var scriptJQ = jqSyntax{name: "jq"}

// jqArgs is a parsed jq command line.
type jqArgs struct {
	slurp  bool
	in     string
	names  []string
	values []any
	expr   string
	rest   []string // the arguments after EXPR
}

func (s jqSyntax) isOption(arg string) bool {
	if !strings.HasPrefix(arg, "-") {
		return false
	}
	return len(arg) > 1 && arg[1] != '.'
}

func (s jqSyntax) parse(ts *testscript.TestScript, args []string) jqArgs {
	a := jqArgs{in: "stdout"}
	for len(args) > 0 && s.isOption(args[0]) {
		switch args[0] {
		case "-s":
			a.slurp, args = true, args[1:]
		case "-in":
			if len(args) < 2 {
				ts.Fatalf("%s: -in needs a file", s.name)
			}
			a.in, args = args[1], args[2:]
		case "--arg":
			if len(args) < 3 {
				ts.Fatalf("%s: --arg needs a name and a value", s.name)
			}
			a.names = append(a.names, "$"+args[1])
			a.values = append(a.values, args[2])
			args = args[3:]
		default:
			ts.Fatalf("%s: unknown option %q", s.name, args[0])
		}
	}
	if len(args) == 0 {
		ts.Fatalf("%s: no expression", s.name)
	}
	a.expr, a.rest = args[0], args[1:]
	return a
}

// eval evaluates a.expr on a.in and returns the one result, failing the
// script otherwise.
func (s jqSyntax) eval(ts *testscript.TestScript, a jqArgs) any {
	v, err := jqEval(a, ts.ReadFile(a.in))
	if err != nil {
		ts.Fatalf("%s: %s: %v", s.name, a.in, err)
	}
	return v
}

// render is the text form of a result, as jqRender, failing the script
// on a result JSON cannot encode.
func (s jqSyntax) render(ts *testscript.TestScript, v any, quoted bool) string {
	out, err := jqRender(v, quoted)
	if err != nil {
		ts.Fatalf("%s: cannot render %v: %v", s.name, v, err)
	}
	return out
}

// cmdJQ is `[!] NAME [-s] [-in FILE] [--arg NAME VALUE]... EXPR WANT`:
// EXPR on the JSON of the last command's stdout (or FILE) must yield
// exactly one result equal to WANT (with !, different from WANT): compact
// JSON, a string unquoted unless WANT starts with a double quote.
func (s jqSyntax) cmdJQ(ts *testscript.TestScript, neg bool, args []string) {
	a := s.parse(ts, args)
	if len(a.rest) != 1 {
		ts.Fatalf("usage: %s [-s] [-in FILE] [--arg NAME VALUE]... EXPR WANT", s.name)
	}
	want := a.rest[0]
	got := s.render(ts, s.eval(ts, a), strings.HasPrefix(want, `"`))
	switch {
	case neg && got == want:
		ts.Fatalf("%s %s: got %s, want anything else", s.name, a.expr, got)
	case !neg && got != want:
		ts.Fatalf("%s %s: got %s, want %s", s.name, a.expr, got, want)
	}
}

// cmdEnvout is `envout NAME [[-s] [-in FILE] [--arg NAME VALUE]... EXPR]`:
// set NAME to the last command's stdout, trimmed, or to the result of
// EXPR on it (rendered as for jq, strings unquoted).
func (s jqSyntax) cmdEnvout(ts *testscript.TestScript, neg bool, args []string) {
	const usage = "usage: envout NAME [[-s] [-in FILE] [--arg NAME VALUE]... EXPR]"
	if neg || len(args) < 1 {
		ts.Fatalf(usage)
	}
	if len(args) == 1 {
		ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
		return
	}
	a := s.parse(ts, args[1:])
	if len(a.rest) != 0 {
		ts.Fatalf(usage)
	}
	ts.Setenv(args[0], s.render(ts, s.eval(ts, a), false))
}

// jqEval evaluates a.expr (gojq) on the JSON text and returns the one
// result. The text must hold exactly one JSON value unless a.slurp: then
// all of its values (e.g. JSONL) form one array, as with jq -s. It
// returns an error instead of failing, so that waits can poll.
func jqEval(a jqArgs, text string) (any, error) {
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
			return nil, fmt.Errorf("not JSON: %w\n%s", err, text)
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
		return nil, fmt.Errorf("%d JSON values, want exactly 1 (use -s for JSONL)", len(values))
	}
	q, err := gojq.Parse(a.expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", a.expr, err)
	}
	code, err := gojq.Compile(q, gojq.WithVariables(a.names))
	if err != nil {
		return nil, fmt.Errorf("compile %q: %w", a.expr, err)
	}
	iter := code.Run(input, a.values...)
	var results []any
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, ok := v.(error); ok {
			return nil, fmt.Errorf("%q: %w", a.expr, err)
		}
		results = append(results, v)
	}
	if len(results) != 1 {
		return nil, fmt.Errorf("%q yields %d results, want exactly 1", a.expr, len(results))
	}
	return results[0], nil
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

// jqRender is the jq commands' text form of a result: a string unquoted
// unless quoted is set, anything else compact JSON with sorted keys.
func jqRender(v any, quoted bool) (string, error) {
	if s, ok := v.(string); ok && !quoted {
		return s, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// ---- testscript: proving the custom commands can fail ----

// checkScriptCommands runs each script of cases, which must fail, and
// pass, which must pass, with the parameters params returns for the
// script files.
func checkScriptCommands(t *testing.T, params func(files []string) testscript.Params, cases map[string]string, pass string) {
	t.Helper()
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
	rec := &recordT{failed: map[string]bool{}, logs: map[string]string{}}
	testscript.RunT(rec, params(files))
	for name := range cases {
		if !rec.failed[name] {
			t.Errorf("script %s passed, want a failure:\n%s", name, rec.logs[name])
		}
	}
	if rec.failed["pass"] {
		t.Errorf("script pass failed:\n%s", rec.logs["pass"])
	}
}

// recordT is a testscript.T that records which scripts failed instead
// of failing the test.
type recordT struct {
	mu     sync.Mutex
	name   string
	root   *recordT
	failed map[string]bool
	logs   map[string]string
	log    strings.Builder
}

func (r *recordT) Skip(args ...any) { runtime.Goexit() }
func (r *recordT) Fatal(args ...any) {
	r.Log(args...)
	r.FailNow()
}
func (r *recordT) Parallel()       {}
func (r *recordT) Verbose() bool   { return false }
func (r *recordT) Log(args ...any) { fmt.Fprintln(&r.log, args...) }
func (r *recordT) top() *recordT {
	if r.root != nil {
		return r.root
	}
	return r
}

func (r *recordT) FailNow() {
	top := r.top()
	top.mu.Lock()
	top.failed[r.name] = true
	top.mu.Unlock()
	runtime.Goexit()
}

func (r *recordT) Run(name string, f func(testscript.T)) {
	sub := &recordT{name: name, root: r.top()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(sub)
	}()
	<-done
	top := r.top()
	top.mu.Lock()
	top.logs[name] = sub.log.String()
	top.mu.Unlock()
}

// ---- waits ----

// pollEvery is how often the waits look again.
const pollEvery = 50 * time.Millisecond

// poll calls cond every pollEvery until it holds or timeout has passed.
// It returns whether cond held, what cond last described, and how long
// the poll took.
func poll(timeout time.Duration, cond func() (bool, string)) (bool, string, time.Duration) {
	start := time.Now()
	for {
		ok, last := cond()
		if ok {
			return true, last, time.Since(start)
		}
		if time.Since(start) > timeout {
			return false, last, time.Since(start)
		}
		time.Sleep(pollEvery)
	}
}

// eventually polls cond until it holds; at the deadline the test fails
// with what cond last described.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, last, _ := poll(timeout, cond); !ok {
		t.Fatalf("%s: not reached within %v; last seen: %s", what, timeout, last)
	}
}

// ---- Go tests: cq processes on one home ----

// cqEnv is one CQ_HOME and the environment of the cq processes run on it:
// CQ_HOME=dir/home, HOME=dir, TZ=UTC, no other CQ_ variable, a GORACE
// without the exit sleep; the processes run in dir.
type cqEnv struct {
	t    *testing.T
	dir  string // the processes' working folder; tasks write here
	home string
	env  []string
	// timeout bounds each command of runIn.
	timeout time.Duration
	// strict: runIn fails the test when cq cannot run or outlives the
	// timeout; otherwise it reports code -1 and the error on stderr, and
	// may be called from any goroutine.
	strict bool
}

// newCQEnv makes a cqEnv whose store is SQLite's, in the home: under $CQ_TEST_DB=postgres (make
// test-pg) the test is skipped, since the SQLite half of make test runs
// it. newBackendEnv is the same on the backend $CQ_TEST_DB chooses.
func newCQEnv(t *testing.T, timeout time.Duration, strict bool) *cqEnv {
	t.Helper()
	if db := os.Getenv("CQ_TEST_DB"); db != "" && db != "sqlite" {
		t.Skipf("a test of cq on SQLite (run by the SQLite half); $CQ_TEST_DB chooses %s", db)
	}
	return newEnvIn(t, timeout, strict)
}

// newBackendEnv is newCQEnv on testDB's store: SQLite in the home, or a
// schema of the test's own when $CQ_TEST_DB chooses PostgreSQL.
func newBackendEnv(t *testing.T, timeout time.Duration, strict bool) *cqEnv {
	t.Helper()
	return newEnvIn(t, timeout, strict).onTestDB()
}

func newEnvIn(t *testing.T, timeout time.Duration, strict bool) *cqEnv {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	var env []string
	gorace := ""
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "CQ_"), strings.HasPrefix(kv, "HOME="):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=")
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "CQ_HOME="+home, "HOME="+dir, "TZ=UTC", "GORACE="+noExitSleep(gorace))
	return &cqEnv{t: t, dir: dir, home: home, env: env, timeout: timeout, strict: strict}
}

// testDB is the store of a test whose processes prove a rule of every
// backend: "" (cq's default, SQLite in the home) unless $CQ_TEST_DB is
// postgres, then a new schema of the test's own on the tests' server,
// dropped at its end; without a server the test is skipped, saying why.
func testDB(t *testing.T) string {
	t.Helper()
	if os.Getenv("CQ_TEST_DB") != "postgres" {
		return ""
	}
	return pgtest.Schema(t)
}

// onTestDB points e's processes at testDB's store.
func (e *cqEnv) onTestDB() *cqEnv {
	if db := testDB(e.t); db != "" {
		e.env = append(e.env, "CQ_DB="+db)
	}
	return e
}

// path is a file in the working folder.
func (e *cqEnv) path(name string) string { return filepath.Join(e.dir, name) }

// command prepares a cq process.
func (e *cqEnv) command(ctx context.Context, stdin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env, cmd.Dir = e.env, e.dir
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// runIn runs one cq command with stdin to its end (e.timeout at most).
func (e *cqEnv) runIn(stdin string, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	cmd := e.command(ctx, stdin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	secs := int(e.timeout / time.Second)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case e.strict:
		e.t.Fatalf("cq %s: %v", strings.Join(args, " "), err)
	default:
		return out.String(), errb.String() + err.Error(), -1
	}
	if ctx.Err() != nil {
		if e.strict {
			e.t.Fatalf("cq %s: did not end within %ds", strings.Join(args, " "), secs)
		}
		return out.String(), errb.String() + fmt.Sprintf("(killed after %ds)", secs), -1
	}
	return out.String(), errb.String(), code
}

func (e *cqEnv) run(args ...string) (string, string, int) {
	e.t.Helper()
	return e.runIn("", args...)
}

// ok runs cq and requires exit 0 and a silent stderr.
func (e *cqEnv) ok(args ...string) string {
	e.t.Helper()
	out, errs, code := e.run(args...)
	if code != 0 || errs != "" {
		e.t.Fatalf("cq %s: exit %d, stderr %q, stdout %q", strings.Join(args, " "), code, errs, out)
	}
	return out
}

// events is the whole event log, from cq events.
func (e *cqEnv) events() []cqEvent {
	e.t.Helper()
	out := e.ok("events")
	var evs []cqEvent
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev cqEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			e.t.Fatalf("cq events: %v: %s", err, sc.Text())
		}
		evs = append(evs, ev)
	}
	return evs
}

// cqEvent is one line of cq events.
type cqEvent struct {
	Seq    int64           `json:"seq"`
	At     string          `json:"at"`
	Kind   string          `json:"kind"`
	TaskID *string         `json:"task_id"`
	RunID  *string         `json:"run_id"`
	From   *string         `json:"from"`
	To     *string         `json:"to"`
	Reason *string         `json:"reason"`
	Data   json.RawMessage `json:"data"`
}

func (ev cqEvent) String() string {
	return fmt.Sprintf("{seq %d %s task=%s run=%s %s→%s reason=%s}", ev.Seq, ev.Kind, nullStr(ev.TaskID), nullStr(ev.RunID),
		nullStr(ev.From), nullStr(ev.To), nullStr(ev.Reason))
}

// strOf is *p, or "" for nil.
func strOf(p *string) string { return derefOr(p, "") }

// nullStr is *p, or "<null>" for nil: for messages.
func nullStr(p *string) string { return derefOr(p, "<null>") }

// derefOr is *p, or null for nil.
func derefOr(p *string, null string) string {
	if p == nil {
		return null
	}
	return *p
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
