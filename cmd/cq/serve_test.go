package main

// cq serve's gateway (serve.go, serve_tasks.go, serve_queues.go), end to
// end: the real binary over HTTP, on SQLite and (with CQ_TEST_DB=postgres)
// on PostgreSQL. What the endpoints answer is compared with what the
// command line prints for the same store, since they run the same code.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ---- a cq serve process ----

// gwProc is one cq serve process, and a client of it.
type gwProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	client *http.Client
	stderr syncBuffer
	first  string // its first stderr line
	done   chan struct{}
	code   int // valid once done is closed
}

// startGateway starts cq serve on e's store with args (--listen
// 127.0.0.1:0 unless args give --listen) and waits for its first stderr
// line, serve.started, which gives the address it bound; an address of
// every interface is reached on 127.0.0.1. t.Cleanup stops it.
func startGateway(t *testing.T, e *cqEnv, args ...string) *gwProc {
	t.Helper()
	return startGatewayEnv(t, e, nil, args...)
}

// startGatewayEnv is startGateway with env added to cq serve's
// environment.
func startGatewayEnv(t *testing.T, e *cqEnv, env []string, args ...string) *gwProc {
	t.Helper()
	if !slices.Contains(args, "--listen") {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	g := &gwProc{t: t, done: make(chan struct{}), client: &http.Client{Transport: &http.Transport{}}}
	g.cmd = e.command(context.Background(), "", append([]string{"serve"}, args...)...)
	g.cmd.Env = append(append([]string(nil), g.cmd.Env...), env...)
	pipe, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start cq serve: %v", err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(nil, 1<<20)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				first <- sc.Text()
			}
			_, _ = g.stderr.Write(append(sc.Bytes(), '\n'))
		}
		err := g.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			g.code = ee.ExitCode()
		default:
			g.code = -2
		}
		close(g.done)
	}()
	t.Cleanup(func() {
		g.client.CloseIdleConnections()
		select {
		case <-g.done:
		default:
			_ = g.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-g.done:
			case <-time.After(20 * time.Second):
				_ = g.cmd.Process.Kill()
				<-g.done
			}
		}
		if t.Failed() {
			t.Logf("cq serve stderr:\n%s", g.stderr.String())
		}
	})
	select {
	case g.first = <-first:
		var v struct {
			Time  string `json:"time"`
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Addr  string `json:"addr"`
		}
		if err := json.Unmarshal([]byte(g.first), &v); err != nil || v.Msg != "serve.started" || v.Addr == "" || v.Level != "INFO" || v.Time == "" {
			t.Fatalf("cq serve's first stderr line is not serve.started with its address: %q", g.first)
		}
		_, port, err := net.SplitHostPort(v.Addr)
		if err != nil {
			t.Fatalf("serve.started: address %q: %v", v.Addr, err)
		}
		g.base = "http://127.0.0.1:" + port
	case <-g.done:
		t.Fatalf("cq serve exited %d before it started; stderr:\n%s", g.code, g.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("cq serve did not say serve.started within 30s; stderr:\n%s", g.stderr.String())
	}
	return g
}

// gwResp is one answer of the server.
type gwResp struct {
	status int
	header http.Header
	body   string
}

// do sends a request (headers: name, value, …) and reads the answer.
func (g *gwProc) do(method, path, body string, headers ...string) gwResp {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			req.Host = headers[i+1]
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return gwResp{resp.StatusCode, resp.Header, string(b)}
}

// want sends a request, requires the status and a JSON body, and
// decodes it into v (nil: only checked to be JSON).
func (g *gwProc) want(status int, v any, method, path, body string, headers ...string) gwResp {
	g.t.Helper()
	r := g.do(method, path, body, headers...)
	if r.status != status {
		g.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		g.t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if v == nil {
		var any any
		v = &any
	}
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		g.t.Fatalf("%s %s: body is not the JSON expected: %v\n%s", method, path, err, r.body)
	}
	return r
}

// gwErr is the JSON of an error answer.
type gwErr struct {
	Error       *string `json:"error"`
	Code        *int    `json:"code"`
	Holder      string  `json:"holder"`
	HolderState string  `json:"holder_state"`
}

// wantErr sends a request and requires the status and a JSON error
// {"error", "code"} with the exit code.
func (g *gwProc) wantErr(status, code int, method, path, body string, headers ...string) gwErr {
	g.t.Helper()
	var e gwErr
	r := g.want(status, &e, method, path, body, headers...)
	if e.Error == nil || e.Code == nil {
		g.t.Fatalf("%s %s: %d but not a JSON error: %s", method, path, status, r.body)
	}
	if *e.Code != code {
		g.t.Errorf("%s %s: code %d (%s), want %d", method, path, *e.Code, *e.Error, code)
	}
	if strings.Contains(*e.Error, "\n") {
		g.t.Errorf("%s %s: error of more than one line: %q", method, path, *e.Error)
	}
	return e
}

// stop sends SIGTERM and returns the exit code and how long the exit
// took (the test fails after 20s).
func (g *gwProc) stop() (int, time.Duration) {
	g.t.Helper()
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		g.t.Fatal(err)
	}
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		g.t.Fatalf("cq serve still running 20s after SIGTERM")
	}
	return g.code, time.Since(start)
}

// requestLines are the http.request lines cq serve has logged.
func (g *gwProc) requestLines() []map[string]any {
	g.t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(g.stderr.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			g.t.Fatalf("cq serve logged a line that is not JSON: %q", l)
		}
		if v["msg"] == "http.request" {
			out = append(out, v)
		}
	}
	return out
}

// sameJSON fails the test unless a and b are the same JSON value.
func sameJSON(t *testing.T, what, a, b string) {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
	if !reflect.DeepEqual(va, vb) {
		t.Errorf("%s: the server's\n%s\nthe command line's\n%s", what, a, b)
	}
}

// cliErr is the message of a failing cq command (its stderr line
// without "cq: "), which must have exited with code.
func cliErr(t *testing.T, e *cqEnv, stdin string, code int, args ...string) string {
	t.Helper()
	_, errs, got := e.runIn(stdin, args...)
	if got != code {
		t.Fatalf("cq %s: exit %d, want %d; stderr %q", strings.Join(args, " "), got, code, errs)
	}
	return strings.TrimPrefix(strings.TrimSuffix(errs, "\n"), "cq: ")
}

// taskCount is how many tasks the store holds.
func taskCount(t *testing.T, e *cqEnv) int {
	t.Helper()
	var ts []struct{}
	if err := json.Unmarshal([]byte(e.ok("ls", "--limit", "0", "-o", "json")), &ts); err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// ---- tests ----

// TestServeTasks: POST /tasks, one spec or a JSONL batch, answers as the
// command line would (the task as cq show -o json, the same messages and
// codes), and a sender's retry never makes a second task; GET /tasks and
// GET /tasks/{id} print what cq ls and cq show print.
func TestServeTasks(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)

	// One spec: 201, the task as cq show -o json prints it, a Location.
	r := g.want(http.StatusCreated, nil, "POST", "/tasks", `{"id":"hook-1","cmd":["echo","hi"],"queue":"hooks","key":"k1","priority":"P1"}`)
	if loc := r.header.Get("Location"); loc != "/tasks/hook-1" {
		t.Errorf("Location %q", loc)
	}
	sameJSON(t, "POST /tasks", r.body, e.ok("show", "-o", "json", "hook-1"))
	var task map[string]any
	_ = json.Unmarshal([]byte(r.body), &task)
	for _, f := range []string{"id", "state", "queue", "key", "priority", "attempts", "blocked_reason", "not_before",
		"after", "created_at", "updated_at", "finished_at", "runs"} {
		if _, ok := task[f]; !ok {
			t.Errorf("POST /tasks: the task has no %q: %s", f, r.body)
		}
	}
	if task["state"] != "todo" || task["cwd"] != e.dir {
		t.Errorf("POST /tasks: state %v, cwd %v; want todo and the server's folder %s", task["state"], task["cwd"], e.dir)
	}
	// A pretty-printed object is one spec too.
	g.want(http.StatusCreated, nil, "POST", "/tasks", "{\n  \"id\": \"pretty\",\n  \"shell\": \"true\"\n}\n", "Content-Type", "application/json")

	// The same id and spec again: 200, the same task, still one.
	r = g.want(http.StatusOK, nil, "POST", "/tasks", `{"id":"hook-1","cmd":["echo","hi"],"queue":"hooks","key":"k1","priority":"P1"}`)
	sameJSON(t, "POST /tasks again", r.body, e.ok("show", "-o", "json", "hook-1"))
	if n := taskCount(t, e); n != 2 {
		t.Errorf("%d tasks after a retried POST, want 2", n)
	}

	// The id with another spec: 409, code 3, the CLI's message.
	want := cliErr(t, e, "", 3, "enqueue", "--id", "hook-1", "--queue", "hooks", "--key", "k1", "--priority", "P1", "--", "echo", "ho")
	if got := g.wantErr(http.StatusConflict, 3, "POST", "/tasks", `{"id":"hook-1","cmd":["echo","ho"],"queue":"hooks","key":"k1","priority":"P1"}`); *got.Error != want {
		t.Errorf("id re-used: %q, want the CLI's %q", *got.Error, want)
	}

	// A unique key held: 409 with the holder's id and state.
	want = cliErr(t, e, "", 3, "enqueue", "--key", "k1", "--unique", "--", "true")
	got := g.wantErr(http.StatusConflict, 3, "POST", "/tasks", `{"cmd":["true"],"key":"k1","unique":true}`)
	if *got.Error != want || got.Holder != "hook-1" || got.HolderState != "todo" {
		t.Errorf("unique key held: %+v (%q); want the CLI's %q, holder hook-1 todo", got, *got.Error, want)
	}

	// after naming no task: 404, code 4.
	want = cliErr(t, e, "", 4, "enqueue", "--after", "nope", "--", "true")
	if got := g.wantErr(http.StatusNotFound, 4, "POST", "/tasks", `{"cmd":["true"],"after":["nope"]}`); *got.Error != want {
		t.Errorf("after naming no task: %q, want the CLI's %q", *got.Error, want)
	}

	// A bad spec: 400, code 1, the CLI's message (without the line
	// number a single spec has no use for).
	for _, bad := range []string{
		`{"cmd":["true"],"bogus":1}`,
		`{"cmd":["true"],"priority":"P9"}`,
		`{"shell":"true","cmd":["x"]}`,
		`{"cmd":["true"],"timeout":"soon"}`,
		`["not","an","object"]`,
		`{"cmd":["true"]`,
	} {
		want := strings.TrimPrefix(cliErr(t, e, bad+"\n", 1, "enqueue", "--batch"), "line 1: ")
		if got := g.wantErr(http.StatusBadRequest, 1, "POST", "/tasks", bad); *got.Error != want {
			t.Errorf("POST %s: %q, want the CLI's %q", bad, *got.Error, want)
		}
	}
	g.wantErr(http.StatusBadRequest, 1, "POST", "/tasks", " \n")
	if n := taskCount(t, e); n != 2 {
		t.Errorf("%d tasks after the refused POSTs, want 2", n)
	}

	// A JSONL batch: 201 and {id, state} each, as cq enqueue --batch -o
	// json; all or nothing; the same batch again is 200.
	batch := `{"id":"b1","cmd":["true"]}` + "\n\n" + `{"id":"b2","cmd":["true"],"after":["b1"]}` + "\n" + `{"id":"b3","shell":"true","hold":true}` + "\n"
	var created []map[string]string
	g.want(http.StatusCreated, &created, "POST", "/tasks", batch)
	wantCreated := []map[string]string{{"id": "b1", "state": "todo"}, {"id": "b2", "state": "blocked"}, {"id": "b3", "state": "blocked"}}
	if !reflect.DeepEqual(created, wantCreated) {
		t.Errorf("batch: %v, want %v", created, wantCreated)
	}
	g.want(http.StatusOK, &created, "POST", "/tasks", batch, "Content-Type", "application/x-ndjson")
	// One line is a batch when the Content-Type says JSON lines.
	g.want(http.StatusCreated, &created, "POST", "/tasks", `{"id":"b4","cmd":["true"]}`, "Content-Type", "application/x-ndjson; charset=utf-8")
	if len(created) != 1 || created[0]["id"] != "b4" {
		t.Errorf("a batch of one line: %v", created)
	}
	before := taskCount(t, e)
	for _, c := range []struct {
		batch        string
		status, code int
	}{
		{`{"id":"n1","cmd":["true"]}` + "\n" + `{"cmd":["true"],"bogus":true}`, 400, 1},
		{`{"id":"n1","cmd":["true"]}` + "\n" + `{"cmd":["true"],"after":["nope"]}`, 404, 4},
		{`{"id":"n1","cmd":["true"]}` + "\n" + `{"id":"b1","cmd":["false"]}`, 409, 3},
	} {
		want := cliErr(t, e, c.batch, c.code, "enqueue", "--batch")
		if got := g.wantErr(c.status, c.code, "POST", "/tasks", c.batch); *got.Error != want {
			t.Errorf("batch %q: %q, want the CLI's %q", c.batch, *got.Error, want)
		}
	}
	got = g.wantErr(http.StatusConflict, 3, "POST", "/tasks", `{"id":"n1","cmd":["true"]}`+"\n"+`{"cmd":["true"],"key":"k1","unique":true}`)
	if got.Holder != "hook-1" {
		t.Errorf("a batch's unique key held: holder %q, want hook-1", got.Holder)
	}
	if n := taskCount(t, e); n != before {
		t.Errorf("refused batches stored %d tasks", n-before)
	}

	// GET /tasks/{id}, by id and by prefix, is cq show -o json; an
	// unknown id is 404.
	sameJSON(t, "GET /tasks/b2", g.want(200, nil, "GET", "/tasks/b2", "").body, e.ok("show", "-o", "json", "b2"))
	sameJSON(t, "GET /tasks/hook-", g.want(200, nil, "GET", "/tasks/hook-", "").body, e.ok("show", "-o", "json", "hook-1"))
	want = cliErr(t, e, "", 4, "show", "nope")
	if got := g.wantErr(404, 4, "GET", "/tasks/nope", ""); *got.Error != want {
		t.Errorf("GET /tasks/nope: %q, want the CLI's %q", *got.Error, want)
	}
	want = cliErr(t, e, "", 1, "show", "b")
	if got := g.wantErr(400, 1, "GET", "/tasks/b", ""); *got.Error != want {
		t.Errorf("GET /tasks/b (ambiguous): %q, want the CLI's %q", *got.Error, want)
	}
	// A task still in the spool is drained and shown, as cq show does.
	spooled := strings.TrimSpace(e.ok("enqueue", "--spool", "--id", "spooled", "--", "true"))
	sameJSON(t, "GET /tasks/spooled", g.want(200, nil, "GET", "/tasks/"+spooled, "").body, e.ok("show", "-o", "json", spooled))

	// GET /tasks is cq ls -o json, with its filters.
	for _, c := range []struct{ query, args string }{
		{"", ""},
		{"?limit=0", "--limit 0"},
		{"?limit=2", "--limit 2"},
		{"?state=blocked", "--state blocked"},
		{"?state=todo,blocked&state=done", "--state todo,blocked --state done"},
		{"?queue=hooks", "--queue hooks"},
		{"?key=k1&limit=1", "--key k1 --limit 1"},
		{"?state=done", "--state done"},
	} {
		args := append([]string{"ls", "-o", "json"}, strings.Fields(c.args)...)
		sameJSON(t, "GET /tasks"+c.query, g.want(200, nil, "GET", "/tasks"+c.query, "").body, e.ok(args...))
	}
	for _, c := range []struct{ query, args string }{
		{"?state=nope", "--state nope"},
		{"?limit=-1", "--limit -1"},
		{"?limit=many", "--limit many"},
		{"?queue=a%20b", "--queue=a b"},
	} {
		want := cliErr(t, e, "", 1, append([]string{"ls"}, strings.Fields(c.args)...)...)
		if c.query == "?queue=a%20b" {
			want = cliErr(t, e, "", 1, "ls", "--queue=a b")
		}
		if got := g.wantErr(400, 1, "GET", "/tasks"+c.query, ""); *got.Error != want {
			t.Errorf("GET /tasks%s: %q, want the CLI's %q", c.query, *got.Error, want)
		}
	}
	g.wantErr(400, 1, "GET", "/tasks?states=done", "")
}

// TestServeTaskOps: POST /tasks/{id}/cancel|retry|hold|release answer
// {id, state} as the commands' -o json, record the reason, and refuse as
// they do; POST /runs/{id}/answer answers a running task's question.
func TestServeTaskOps(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	e.ok("enqueue", "--id", "op-task", "--", "true")
	e.ok("enqueue", "--id", "twin", "--", "true")

	type outcome struct{ ID, State string }
	var o outcome
	for _, c := range []struct{ op, body, state string }{
		{"hold", `{"reason":"wait for the window"}`, "blocked"},
		{"release", "", "todo"},
		{"cancel", `{"reason":"not needed"}`, "cancelled"},
		{"retry", `{}`, "todo"},
	} {
		// By a prefix, as the commands take.
		g.want(200, &o, "POST", "/tasks/op-/"+c.op, c.body)
		if o != (outcome{"op-task", c.state}) {
			t.Errorf("POST /tasks/op-/%s: %+v, want op-task %s", c.op, o, c.state)
		}
	}
	var reasons []string
	for _, ev := range e.events() {
		if ev.Reason != nil && strOf(ev.TaskID) == "op-task" {
			reasons = append(reasons, *ev.Reason)
		}
	}
	if !slices.Contains(reasons, "wait for the window") || !slices.Contains(reasons, "not needed") {
		t.Errorf("the reasons given are not in the events: %q", reasons)
	}
	// The commands' refusals, with their messages and codes.
	want := cliErr(t, e, "", 3, "release", "op-task")
	if got := g.wantErr(409, 3, "POST", "/tasks/op-task/release", ""); *got.Error != want {
		t.Errorf("release without a hold: %q, want the CLI's %q", *got.Error, want)
	}
	want = cliErr(t, e, "", 4, "cancel", "nope")
	if got := g.wantErr(404, 4, "POST", "/tasks/nope/cancel", ""); *got.Error != want {
		t.Errorf("cancel nope: %q, want the CLI's %q", *got.Error, want)
	}
	g.wantErr(400, 1, "POST", "/tasks/op-task/hold", `{"reasons":"typo"}`)
	g.wantErr(400, 1, "POST", "/tasks/op-task/hold", `"a string"`)
	g.wantErr(400, 1, "POST", "/tasks/op-task/hold", `{"reason":5}`)
	g.wantErr(404, 1, "POST", "/tasks/op-task/frobnicate", "")

	// cq answer over HTTP: a task asks, the answer approves it.
	e.ok("enqueue", "--id", "asker", "--shell", `cq ask "ship it?" > asker.out 2>&1; echo "exit=$?" >> asker.out`)
	want = cliErr(t, e, "", 3, "answer", "asker", "--approve")
	if got := g.wantErr(409, 3, "POST", "/runs/asker/answer", `{"approve":true}`); *got.Error != want {
		t.Errorf("answer before the question: %q, want the CLI's %q", *got.Error, want)
	}
	startBgWorker(t, e)
	eventually(t, 30*time.Second, "task asker asking", func() (bool, string) {
		out := e.ok("asks", "-q")
		return strings.Contains(out, "asker"), out
	})
	g.wantErr(400, 1, "POST", "/runs/asker/answer", `{"reason":"no verdict"}`)
	g.wantErr(400, 1, "POST", "/runs/asker/answer", "")
	var q map[string]any
	g.want(200, &q, "POST", "/runs/ask/answer", `{"approve":true,"reason":"go ahead"}`)
	if q["task_id"] != "asker" || q["state"] != "approved" || q["reason"] != "go ahead" || q["question"] != "ship it?" {
		t.Errorf("the answered question: %v", q)
	}
	e.ok("wait", "asker", "--timeout", "30s")
	if out, err := os.ReadFile(e.path("asker.out")); err != nil || string(out) != "go ahead\nexit=0\n" {
		t.Errorf("cq ask printed %q (%v), want the reason and exit 0", out, err)
	}
}

// TestServeQueuesWorkersHealth: GET /queues, POST /queues/{name}, GET
// /workers, GET /health and GET /metrics answer as cq queue ls, queue
// set/pause/resume, workers and health do.
func TestServeQueuesWorkersHealth(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	e.ok("enqueue", "--queue", "mail", "--", "true")

	// Settings, named as the flags or as the JSON fields, and paused.
	var q map[string]any
	g.want(200, &q, "POST", "/queues/mail", `{"concurrency":2,"backoff":"1m","transient_retries":5,"timeout-retries":0,"timeout":"0","start_timeout":"2m","warn_after":"1h","timeout_counts_asks":true,"retries":1,"paused":true}`)
	var qs []map[string]any
	if err := json.Unmarshal([]byte(e.ok("queue", "ls", "-o", "json")), &qs); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs, func(m map[string]any) bool { return m["name"] == "mail" })
	if i < 0 || !reflect.DeepEqual(q, qs[i]) {
		t.Errorf("POST /queues/mail answered %v; cq queue ls has %v", q, qs)
	}
	if q["paused"] != true || q["concurrency"] != 2.0 || q["backoff"] != "1m0s" || q["transient_retries"] != 5.0 ||
		q["timeout_retries"] != 0.0 || q["timeout"] != nil || q["timeout_counts_asks"] != true || q["retries"] != 1.0 {
		t.Errorf("POST /queues/mail: %v", q)
	}
	kinds := map[string]int{}
	for _, ev := range e.events() {
		kinds[ev.Kind]++
	}
	if kinds["queue.updated"] != 1 || kinds["queue.paused"] != 1 {
		t.Errorf("events: %v; want one queue.updated and one queue.paused, as queue set then pause", kinds)
	}
	g.want(200, &q, "POST", "/queues/mail", `{"paused":false}`)
	if q["paused"] != false || q["concurrency"] != 2.0 {
		t.Errorf("resumed: %v", q)
	}
	// An empty body makes the queue, as a bare cq queue set.
	g.want(200, &q, "POST", "/queues/fresh", "")
	sameJSON(t, "GET /queues", g.want(200, nil, "GET", "/queues", "").body, e.ok("queue", "ls", "-o", "json"))
	for _, c := range []struct{ body, flag, value string }{
		{`{"backoff":"soon"}`, "--backoff", "soon"},
		{`{"timeout_counts_asks":"maybe"}`, "--timeout-counts-asks", "maybe"},
		{`{"concurrency":-1}`, "--concurrency", "-1"},
	} {
		want := cliErr(t, e, "", 1, "queue", "set", "mail", c.flag, c.value)
		got := g.wantErr(400, 1, "POST", "/queues/mail", c.body)
		// The message names the field as given where the CLI names its flag.
		name := strings.TrimPrefix(c.flag, "--")
		if field := strings.Split(strings.Trim(c.body, "{"), `"`)[1]; *got.Error != want &&
			*got.Error != strings.Replace(want, "--"+name, strings.ReplaceAll(field, "_", "-"), 1) &&
			*got.Error != strings.Replace(want, "--"+name, field, 1) {
			t.Errorf("POST /queues/mail %s: %q, want the CLI's %q", c.body, *got.Error, want)
		}
	}
	for _, bad := range []string{`{"concurrency":"2"}`, `{"concurrency":1.5}`, `{"paused":"yes"}`, `{"bogus":1}`, `[1]`, `{"backoff":30}`} {
		g.wantErr(400, 1, "POST", "/queues/mail", bad)
	}
	want := cliErr(t, e, "", 1, "queue", "set", "bad name")
	if got := g.wantErr(400, 1, "POST", "/queues/bad%20name", ""); *got.Error != want {
		t.Errorf("POST /queues/bad name: %q, want the CLI's %q", *got.Error, want)
	}

	// GET /workers is cq workers -o json: none, then one.
	var ws []map[string]any
	g.want(200, &ws, "GET", "/workers", "")
	if len(ws) != 0 {
		t.Errorf("GET /workers with none running: %v", ws)
	}
	startBgWorker(t, e, "--queue", "other")
	eventually(t, 30*time.Second, "GET /workers lists the worker", func() (bool, string) {
		r := g.want(200, &ws, "GET", "/workers", "")
		return len(ws) == 1, r.body
	})
	var cli []map[string]any
	if err := json.Unmarshal([]byte(e.ok("workers", "-o", "json")), &cli); err != nil || len(cli) != 1 || cli[0]["id"] != ws[0]["id"] {
		t.Errorf("GET /workers %v; cq workers %v", ws, cli)
	}

	// GET /health: cq health -o json; 200 ok or degraded, 503 unhealthy.
	e.ok("heartbeat")
	healthOf := func(query string, args ...string) {
		t.Helper()
		var h, c map[string]any
		r := g.do("GET", "/health"+query, "")
		out, _, code := e.run(append([]string{"health", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatalf("cq health: %v %q", err, out)
		}
		if err := json.Unmarshal([]byte(r.body), &h); err != nil {
			t.Fatalf("GET /health%s: %v %q", query, err, r.body)
		}
		wantStatus := map[string]int{"ok": 200, "degraded": 200, "unhealthy": 503}[c["status"].(string)]
		if h["status"] != c["status"] || r.status != wantStatus || code == 3 {
			t.Errorf("GET /health%s: %d %v; cq health: %v (exit %d)", query, r.status, h["status"], c["status"], code)
		}
		for _, f := range []string{"status", "success_rate", "backlog", "blocked_retry", "failed_24h", "avg_duration_seconds", "last_heartbeat", "states", "queues", "warnings"} {
			if _, ok := h[f]; !ok {
				t.Errorf("GET /health%s: no %q", query, f)
			}
		}
	}
	healthOf("")
	healthOf("?backlog-degraded=0&backlog_unhealthy=0", "--backlog-degraded", "0", "--backlog-unhealthy", "0")
	if r := g.do("GET", "/health?backlog-degraded=0&backlog_unhealthy=0", ""); r.status != 503 {
		t.Errorf("GET /health with a backlog over the unhealthy threshold: %d, want 503: %s", r.status, r.body)
	}
	for _, c := range []struct{ query, args string }{
		{"?window=0", "--window 0"},
		{"?backlog-degraded=many", "--backlog-degraded many"},
		{"?success-degraded=2", "--success-degraded 2"},
		{"?backlog-degraded=10&backlog-unhealthy=5", "--backlog-degraded 10 --backlog-unhealthy 5"},
	} {
		want := cliErr(t, e, "", 1, append([]string{"health"}, strings.Fields(c.args)...)...)
		if got := g.wantErr(400, 1, "GET", "/health"+c.query, ""); *got.Error != want {
			t.Errorf("GET /health%s: %q, want the CLI's %q", c.query, *got.Error, want)
		}
	}
	g.wantErr(400, 1, "GET", "/health?bogus=1", "")

	// GET /metrics: cq health -o prometheus, the same metrics.
	r := g.do("GET", "/metrics", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d, Content-Type %q", r.status, r.header.Get("Content-Type"))
	}
	helps := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "# ") {
				out = append(out, l)
			}
		}
		return out
	}
	if got, want := helps(r.body), helps(e.ok("health", "-o", "prometheus")); !reflect.DeepEqual(got, want) || len(got) == 0 {
		t.Errorf("GET /metrics: %q; cq health -o prometheus: %q", got, want)
	}
	if !strings.Contains(r.body, "\ncq_store_readable 1\n") {
		t.Errorf("GET /metrics:\n%s", r.body)
	}
	g.wantErr(400, 1, "GET", "/metrics?window=x", "")
}

// TestServeRoutes: an unknown path is a JSON 404, a method an endpoint
// does not take a JSON 405 with Allow; no CORS header without --cors.
func TestServeRoutes(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	g.wantErr(404, 1, "GET", "/nope", "")
	g.wantErr(404, 1, "GET", "/tasks/x/y/z", "")
	r := g.do("DELETE", "/tasks", "")
	if r.status != 405 || !strings.Contains(r.header.Get("Allow"), "GET") || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("DELETE /tasks: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
	g.wantErr(405, 1, "DELETE", "/tasks", "")
	g.wantErr(405, 1, "POST", "/health", "")
	g.wantErr(405, 1, "GET", "/tasks/x/cancel", "")
	g.wantErr(405, 1, "OPTIONS", "/tasks", "", "Origin", "https://ops.example.com", "Access-Control-Request-Method", "POST")
	r = g.do("GET", "/queues", "", "Origin", "https://ops.example.com")
	for k := range r.header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("a CORS header without --cors: %s: %s", k, r.header.Get(k))
		}
	}
}

// TestServeBodyLimits: a spec over 1 MiB, or a batch over 16 MiB, is
// refused with 413, and nothing is stored.
func TestServeBodyLimits(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	big := `{"shell":"echo ` + strings.Repeat("x", gwSpecLimit) + `"}`
	g.wantErr(413, 1, "POST", "/tasks", big)
	// Just under the batch limit is taken (as a batch of lines).
	line := `{"cmd":["true"],"env":{"PAD":"` + strings.Repeat("p", 64<<10) + `"}}` + "\n"
	n := (gwBatchLimit - 1) / len(line)
	var created []map[string]string
	g.want(201, &created, "POST", "/tasks", strings.Repeat(line, n))
	if len(created) != n {
		t.Errorf("a batch of %d lines just under the limit: %d created", n, len(created))
	}
	// Just over it is not.
	g.wantErr(413, 1, "POST", "/tasks", strings.Repeat(line, n)+strings.Repeat(" ", gwBatchLimit-n*len(line)+1))
	g.wantErr(413, 1, "POST", "/tasks/x/cancel", `{"reason":"`+strings.Repeat("r", gwSpecLimit)+`"}`)
	if got := taskCount(t, e); got != n {
		t.Errorf("%d tasks stored, want %d", got, n)
	}
}

// writeToken writes a token file with mode perm.
func writeToken(t *testing.T, e *cqEnv, name, content string, perm os.FileMode) string {
	t.Helper()
	path := e.path(name)
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// gwWrites are a request to every endpoint that writes.
var gwWrites = []struct{ path, body string }{
	{"/tasks", `{"id":"w1","cmd":["true"]}`},
	{"/tasks/held/cancel", ""},
	{"/tasks/held/retry", ""},
	{"/tasks/held/hold", ""},
	{"/tasks/held/release", ""},
	{"/runs/held/answer", `{"approve":true}`},
	{"/queues/q", `{"paused":true}`},
}

// gwReads are a request to every endpoint that only reads.
var gwReads = []string{"/tasks", "/tasks/held", "/queues", "/workers", "/health", "/metrics", "/state", "/tasks/held/logs"}

// TestServeToken: with --token-file every write needs the token, on
// loopback too; reads on loopback do not, reads elsewhere do. A refusal
// is 401 with WWW-Authenticate: Bearer, and changes nothing. The token
// is never logged; each request logs one line.
func TestServeToken(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	const token = "s3cret-Token_42"
	tf := writeToken(t, e, "token", token+"\n", 0o600)
	e.ok("enqueue", "--id", "held", "--hold", "--", "true")
	before := e.events()

	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		g := startGateway(t, e, "--listen", listen, "--token-file", tf)
		requests := 0
		refused := func(method, path, body string, headers ...string) {
			t.Helper()
			requests++
			got := g.wantErr(401, 1, method, path, body, headers...)
			if strings.Contains(*got.Error, token) {
				t.Errorf("the 401 names the token: %q", *got.Error)
			}
			if r := g.do(method, path, body, headers...); r.header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("%s %s: WWW-Authenticate %q", method, path, r.header.Get("WWW-Authenticate"))
			}
			requests++
		}
		for _, w := range gwWrites {
			refused("POST", w.path, w.body)
			refused("POST", w.path, w.body, "Authorization", "Bearer wrong")
			refused("POST", w.path, w.body, "Authorization", "Bearer "+token+"x")
			refused("POST", w.path, w.body, "Authorization", "Basic "+token)
			refused("POST", w.path, w.body, "Authorization", token)
		}
		if evs := e.events(); len(evs) != len(before) {
			t.Fatalf("%s: refused writes changed the store: %v", listen, evs[len(before):])
		}
		for _, path := range gwReads {
			if listen == "127.0.0.1:0" {
				requests++
				if r := g.do("GET", path, ""); r.status == 401 {
					t.Errorf("GET %s on loopback without the token: 401", path)
				}
				// A token sent must be right, needed or not.
				refused("GET", path, "", "Authorization", "Bearer wrong")
				continue
			}
			refused("GET", path, "")
			refused("GET", path, "", "Authorization", "Bearer wrong")
		}
		// The dashboard's page and files are public (they hold no data;
		// the page asks for the token), anything else under it is not.
		for _, path := range []string{"/", "/dashboard/app.js", "/dashboard/style.css"} {
			requests++
			if r := g.do("GET", path, ""); r.status != 200 {
				t.Errorf("%s: GET %s without the token: %d, want 200", listen, path, r.status)
			}
		}
		if listen != "127.0.0.1:0" {
			refused("GET", "/dashboard/", "")
		}
		// With the token, every read and write goes through.
		ok := func(method, path, body string) {
			t.Helper()
			requests++
			if r := g.do(method, path, body, "Authorization", "Bearer "+token); r.status >= 400 && r.status != 404 && r.status != 409 {
				t.Errorf("%s %s %s with the token: %d %s", listen, method, path, r.status, r.body)
			}
		}
		for _, path := range []string{"/tasks", "/tasks/held", "/queues", "/workers", "/metrics"} {
			ok("GET", path, "")
		}
		for _, w := range gwWrites {
			ok("POST", w.path, w.body)
		}
		code, _ := g.stop()
		if code != 0 {
			t.Errorf("%s: exit %d after SIGTERM", listen, code)
		}
		// One line per request, with its status; never the token.
		if strings.Contains(g.stderr.String(), token) {
			t.Errorf("%s: the token is in the log:\n%s", listen, g.stderr.String())
		}
		lines := g.requestLines()
		if len(lines) != requests {
			t.Errorf("%s: %d request lines for %d requests", listen, len(lines), requests)
		}
		for _, l := range lines {
			if _, ok := l["status"].(float64); !ok || l["method"] == nil || l["path"] == nil || l["duration_ms"] == nil {
				t.Errorf("%s: request line %v", listen, l)
			}
		}
		if len(lines) > 0 && lines[0]["status"] != 401.0 {
			t.Errorf("%s: the first request's line: %v, want status 401", listen, lines[0])
		}
		// For the next round: as before this one.
		e.ok("queue", "resume", "q")
		e.ok("hold", "held")
		e.run("cancel", "w1")
		before = e.events()
	}
}

// TestServeRefusesToStart: an address other than loopback without a
// token, or a token file that is empty or that others may read, is
// refused at start: exit 1, one line on stderr, nothing listening.
func TestServeRefusesToStart(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "--token-file"},
		{[]string{"--listen", "[::]:0"}, "--token-file"},
		{[]string{"--listen", ":0"}, "--token-file"},
		{[]string{"--token-file", writeToken(t, e, "open", "tok\n", 0o644)}, "chmod 600"},
		{[]string{"--token-file", writeToken(t, e, "group", "tok\n", 0o640)}, "chmod 600"},
		{[]string{"--token-file", writeToken(t, e, "empty", " \n", 0o600)}, "is empty"},
		{[]string{"--token-file", e.path("missing")}, "--token-file"},
		{[]string{"--listen", "nowhere"}, "--listen"},
		{[]string{"--listen", ""}, "--listen"},
		{[]string{"--cors", "https://ops.example.com/path"}, "--cors"},
		{[]string{"--cors", "*"}, "--token-file"},
	} {
		out, errs, code := e.run(append([]string{"serve"}, c.args...)...)
		if code != 1 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "cq: ") || !strings.Contains(errs, c.want) {
			t.Errorf("cq serve %q: exit %d, stdout %q, stderr %q; want exit 1 and one line naming %s", c.args, code, out, errs, c.want)
		}
	}
}

// TestServeBrowsers: without a token, a web page elsewhere can neither
// write through a browser (Origin) nor read through DNS rebinding (Host);
// --cors lets one origin, with its preflight.
func TestServeBrowsers(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	g.wantErr(403, 1, "POST", "/tasks", `{"shell":"echo pwned"}`, "Origin", "https://evil.example")
	g.wantErr(403, 1, "POST", "/tasks", `{"shell":"echo pwned"}`, "Origin", "null")
	g.wantErr(403, 1, "GET", "/tasks", "", "Host", "evil.example:5680")
	g.wantErr(403, 1, "POST", "/tasks", `{"shell":"echo pwned"}`, "Host", "evil.example")
	if n := taskCount(t, e); n != 0 {
		t.Fatalf("%d tasks stored by refused requests", n)
	}
	// The server's own pages, and names of loopback, are fine.
	host := strings.TrimPrefix(g.base, "http://")
	g.want(201, nil, "POST", "/tasks", `{"shell":"true"}`, "Origin", g.base)
	g.want(200, nil, "GET", "/tasks", "", "Host", "localhost"+host[strings.LastIndex(host, ":"):])
	g.want(200, nil, "GET", "/tasks", "", "Host", "[::1]:80")

	const origin = "https://ops.example.com"
	tf := writeToken(t, e, "token", "tok", 0o600)
	c := startGateway(t, e, "--cors", origin, "--token-file", tf)
	r := c.do("OPTIONS", "/tasks", "", "Origin", origin, "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization,content-type")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != origin ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(r.header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("preflight: %d %v", r.status, r.header)
	}
	r = c.want(201, nil, "POST", "/tasks", `{"shell":"true"}`, "Origin", origin, "Authorization", "Bearer tok")
	if r.header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("POST with --cors: Access-Control-Allow-Origin %q", r.header.Get("Access-Control-Allow-Origin"))
	}
	c.wantErr(403, 1, "POST", "/tasks", `{"shell":"true"}`, "Origin", "https://other.example", "Authorization", "Bearer tok")
}

// TestServeSIGTERM: cq serve stops at once on SIGTERM with an idle
// client connection open, exits 0, and says so.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	g := startGateway(t, e)
	g.want(200, nil, "GET", "/tasks", "") // a kept-alive connection stays open
	code, took := g.stop()
	if code != 0 || took > 4*time.Second {
		t.Errorf("SIGTERM: exit %d after %v; want 0, at once", code, took)
	}
	if !strings.Contains(g.stderr.String(), `"msg":"serve.stopped"`) {
		t.Errorf("no serve.stopped line:\n%s", g.stderr.String())
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(g.base, "http://"), time.Second); err == nil {
		t.Errorf("still listening after it exited")
	}
}
