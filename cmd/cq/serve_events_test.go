package main

// cq serve's streaming endpoints (serve_events.go), end to end: the real
// binary over HTTP, each writer a process of its own, on SQLite and (with
// CQ_TEST_DB=postgres) on PostgreSQL.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ---- a cq serve process ----

// streamServer is one cq serve --listen 127.0.0.1:0 process, as
// serve_test.go starts it (startGateway), with the reads of this file.
type streamServer = gwProc

// startStreamServer starts cq serve on e's store with env added to its
// environment; t.Cleanup stops it if the test has not.
func startStreamServer(t *testing.T, e *cqEnv, env ...string) *streamServer {
	t.Helper()
	return startGatewayEnv(t, e, env)
}

// get GETs path (with headers, name then value) and reads the whole
// response.
func (s *streamServer) get(path string, headers ...string) (*http.Response, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp, string(body)
}

// getOK is get requiring 200 and the content type.
func (s *streamServer) getOK(path, contentType string) string {
	s.t.Helper()
	resp, body := s.get(path)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s: %s, want 200: %s", path, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		s.t.Errorf("GET %s: Content-Type %q, want %s", path, ct, contentType)
	}
	return body
}

// wantHTTPError GETs path and requires the status and the JSON error
// {"error", "code"} with the CLI's exit code.
func (s *streamServer) wantHTTPError(path string, status, code int, headers ...string) string {
	s.t.Helper()
	resp, body := s.get(path, headers...)
	var v struct {
		Error *string `json:"error"`
		Code  *int    `json:"code"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil || v.Code == nil {
		s.t.Errorf("GET %s %q: %s, body %q: not a JSON error", path, headers, resp.Status, body)
		return ""
	}
	if resp.StatusCode != status || *v.Code != code {
		s.t.Errorf("GET %s %q: %s, code %d (%s); want %d, code %d", path, headers, resp.Status, *v.Code, *v.Error, status, code)
	}
	return *v.Error
}

// ---- a Server-Sent Events client ----

// sseStream is one GET /events response being read.
type sseStream struct {
	resp   *http.Response
	cancel context.CancelFunc
	rd     *bufio.Reader
}

// sseRecord is what the stream sent up to a blank line: an event when it
// has data, an id alone, or comments.
type sseRecord struct {
	id       string
	hasID    bool
	data     []string
	comments []string
}

// openSSE GETs path as an EventSource would, with Last-Event-ID when
// lastID is not empty, and requires a stream.
func (s *streamServer) openSSE(ctx context.Context, path, lastID string) (*sseStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	h := resp.Header
	if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != "text/event-stream" ||
		h.Get("Cache-Control") != "no-cache" || h.Get("X-Accel-Buffering") != "no" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s (Last-Event-ID %q): %s, headers %v: %s", path, lastID, resp.Status, h, body)
	}
	return &sseStream{resp: resp, cancel: cancel, rd: bufio.NewReader(resp.Body)}, nil
}

func (c *sseStream) close() {
	c.cancel()
	c.resp.Body.Close()
}

// errSSEAbort is what next returns when abort told it to stop.
var errSSEAbort = errors.New("the client stopped reading mid-event")

// next reads the next record. abort, when set, is asked after each id
// line whether to stop there, an event half read, as a client cut off
// would.
func (c *sseStream) next(abort func() bool) (sseRecord, error) {
	var r sseRecord
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return r, err // a line without its end is no line
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if r.hasID || len(r.data) > 0 || len(r.comments) > 0 {
				return r, nil
			}
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "":
			r.comments = append(r.comments, value)
		case "id":
			r.id, r.hasID = value, true
			if abort != nil && abort() {
				return r, errSSEAbort
			}
		case "data":
			r.data = append(r.data, value)
		default:
			return r, fmt.Errorf("unexpected field %q", line)
		}
	}
}

// sseSeq is the seq of an event's data, checked against its id.
func sseSeq(r sseRecord) (int64, error) {
	if len(r.data) != 1 {
		return 0, fmt.Errorf("an event of %d data lines, want 1: %q", len(r.data), r.data)
	}
	var ev cqEvent
	if err := json.Unmarshal([]byte(r.data[0]), &ev); err != nil {
		return 0, fmt.Errorf("data is not an event: %w: %q", err, r.data[0])
	}
	if !r.hasID || r.id != strconv.FormatInt(ev.Seq, 10) {
		return 0, fmt.Errorf("event of seq %d has id %q", ev.Seq, r.id)
	}
	return ev.Seq, nil
}

// eventLines are cq events' lines (those after since), as printed.
func eventLines(e *cqEnv, since int64) []string {
	e.t.Helper()
	out := e.ok("events", "--since", strconv.FormatInt(since, 10))
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")[:strings.Count(out, "\n")]
}

// seqOfLine is the seq of one of cq events' lines.
func seqOfLine(t *testing.T, line string) int64 {
	t.Helper()
	var ev cqEvent
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("cq events printed %q: %v", line, err)
	}
	return ev.Seq
}

// ---- the tests ----

// sseResumer reads GET /events, cutting itself off at random points
// and reconnecting from the last id it was given, as an EventSource
// does, until stopped. Everything it received is kept for the test.
type sseResumer struct {
	mu     sync.Mutex
	lines  []string // the data of every event received, in order
	last   int64    // the seq of the last one
	lastID string   // the last id received (Last-Event-ID)
	bad    []string
	// conns counts the connections by how they resumed; cut counts the
	// events abandoned half read.
	conns map[string]int
	cut   int
}

func (c *sseResumer) fail(format string, a ...any) {
	c.mu.Lock()
	c.bad = append(c.bad, fmt.Sprintf(format, a...))
	c.mu.Unlock()
}

func (c *sseResumer) position() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, len(c.lines)
}

// run reads until ctx is done.
func (c *sseResumer) run(ctx context.Context, s *streamServer, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	for n := 0; ctx.Err() == nil; n++ {
		// The first connection gives ?since=0; later ones resume by
		// Last-Event-ID, except one by ?since= alone, and one that gives
		// both, with a ?since= that would repeat everything: the header
		// must win.
		path, header, mode := "/events", c.lastID, "Last-Event-ID"
		switch n {
		case 0:
			path, header, mode = "/events?since=0", "", "first, ?since=0"
		case 3:
			path, header, mode = "/events?since="+url.QueryEscape(c.lastID), "", "?since="
		case 5:
			path, mode = "/events?since=0", "Last-Event-ID with ?since=0"
		}
		from := header
		if from == "" {
			from = strings.TrimPrefix(path, "/events?since=")
		}
		st, err := s.openSSE(ctx, path, header)
		if err != nil {
			if ctx.Err() == nil {
				c.fail("connection %d: %v", n, err)
			}
			return
		}
		c.mu.Lock()
		c.conns[mode]++
		c.mu.Unlock()
		// This connection reads budget events, then closes; one in four
		// stops in the middle of the event after.
		budget := 1 + rng.IntN(25)
		midEvent := rng.IntN(4) == 0
		ids := 0
		abort := func() bool {
			ids++
			return midEvent && ids > budget+1 // +1: the opening id
		}
		for k := 0; ; k++ {
			r, err := st.next(abort)
			if errors.Is(err, errSSEAbort) {
				c.mu.Lock()
				c.cut++
				c.mu.Unlock()
				break
			}
			if err != nil {
				if ctx.Err() == nil {
					c.fail("connection %d (%s from %s): the stream ended: %v", n, mode, from, err)
				}
				break
			}
			if k == 0 {
				// The stream opens with its starting point as an id.
				if !r.hasID || r.id != from || len(r.data) > 0 {
					c.fail("connection %d (%s from %s) opened with %+v, want the id %s alone", n, mode, from, r, from)
				}
			}
			if r.hasID {
				c.mu.Lock()
				c.lastID = r.id
				c.mu.Unlock()
			}
			if len(r.data) == 0 {
				continue
			}
			seq, err := sseSeq(r)
			c.mu.Lock()
			switch {
			case err != nil:
				c.bad = append(c.bad, fmt.Sprintf("connection %d: %v", n, err))
			case seq <= c.last:
				c.bad = append(c.bad, fmt.Sprintf("connection %d (%s from %s): seq %d after %d: repeated or out of order", n, mode, from, seq, c.last))
			}
			c.last = seq
			c.lines = append(c.lines, r.data[0])
			c.mu.Unlock()
			if !midEvent && k >= budget {
				break
			}
		}
		st.close()
	}
}

// TestServeEventsResume: a client reads GET /events while producers
// enqueue, operators cancel and retry and a worker runs short tasks,
// each a process of its own; it cuts itself off at random points (now
// and then half-way through an event) and reconnects with Last-Event-ID,
// once with ?since= alone and once with both. Once the writers stopped
// and it caught up, it has received every event exactly once, in
// strictly increasing seq, as cq events prints them.
func TestServeEventsResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hundreds of processes")
	}
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, false)
	e.ok("queue", "set", "work", "--retries", "1", "--backoff", "100ms")
	srv := startStreamServer(t, e)

	worker := e.command(context.Background(), "", "worker", "--concurrency", "4", "--queue", "work", "--grace", "1s")
	var workerErr syncBuffer
	worker.Stderr = &workerErr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	workerDone := make(chan struct{})
	go func() { _ = worker.Wait(); close(workerDone) }()
	t.Cleanup(func() {
		_ = worker.Process.Kill()
		<-workerDone
	})

	client := &sseResumer{conns: map[string]int{}}
	readCtx, stopReading := context.WithCancel(context.Background())
	defer stopReading()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		client.run(readCtx, srv, 1)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var failures []string
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	const producers, perProducer = 3, 30
	var prodWG, opWG sync.WaitGroup
	var opsDone atomic.Int64
	producersDone := make(chan struct{})
	for p := 0; p < producers; p++ {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			for j := 0; j < perProducer && ctx.Err() == nil; j++ {
				cmd := "true"
				if j%3 == 0 {
					cmd = "false"
				}
				if _, errs, code := e.run("enqueue", "--queue", "work", "--", cmd); code != 0 {
					fail("cq enqueue: exit %d, %s", code, errs)
				}
			}
		}()
	}
	go func() { prodWG.Wait(); close(producersDone) }()
	for o := 0; o < 2; o++ {
		opWG.Add(1)
		go func() {
			defer opWG.Done()
			rng := rand.New(rand.NewPCG(uint64(o), 3))
			for round := 0; ctx.Err() == nil; round++ {
				select {
				case <-producersDone:
					if round >= 5 {
						return
					}
				default:
				}
				// Cancel a task waiting or running, or retry one ended
				// badly: each changes the task, unless another process
				// did first.
				op, states := "cancel", []string{"--state", "todo", "--state", "doing"}
				if rng.IntN(2) == 0 {
					op, states = "retry", []string{"--state", "failed", "--state", "cancelled"}
				}
				out, errs, code := e.run(append([]string{"ls", "-q", "--limit", "0"}, states...)...)
				if code != 0 {
					fail("cq ls: exit %d, %s", code, errs)
					return
				}
				ids := strings.Fields(out)
				if len(ids) == 0 {
					continue
				}
				// A lost race or an illegal transition (3) is a normal
				// outcome.
				switch _, errs, code := e.run(op, ids[rng.IntN(len(ids))]); code {
				case 0:
					opsDone.Add(1)
				case 3:
				default:
					fail("cq %s: exit %d, %s", op, code, errs)
				}
			}
		}()
	}
	prodWG.Wait()
	opWG.Wait()
	if ctx.Err() != nil {
		t.Fatal("the writers did not finish in time")
	}
	// The worker is a writer too: stopped, it writes no more.
	_ = worker.Process.Signal(syscall.SIGTERM)
	select {
	case <-workerDone:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop within 60s of SIGTERM")
	}
	for _, f := range failures {
		t.Error(f)
	}

	want := eventLines(e, 0)
	if len(want) == 0 {
		t.Fatal("cq events printed nothing")
	}
	last := seqOfLine(t, want[len(want)-1])
	eventually(t, 60*time.Second, fmt.Sprintf("the client to reach seq %d", last), func() (bool, string) {
		seq, n := client.position()
		return seq >= last, fmt.Sprintf("at seq %d after %d events", seq, n)
	})
	stopReading()
	<-readerDone

	client.mu.Lock()
	defer client.mu.Unlock()
	for _, b := range client.bad {
		t.Error(b)
	}
	got := client.lines
	// Anything after cq events' last seq (there should be nothing) is
	// not compared.
	for len(got) > 0 && seqOfLine(t, got[len(got)-1]) > last {
		got = got[:len(got)-1]
	}
	if len(got) != len(want) {
		t.Errorf("the client received %d events up to seq %d, cq events printed %d", len(got), last, len(want))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			t.Fatalf("event %d: the client received\n%s\ncq events printed\n%s", i, got[i], want[i])
		}
	}
	t.Logf("%d events, %d cancels and retries; connections %v; %d events abandoned half read", len(want), opsDone.Load(), client.conns, client.cut)
	if len(want) < 300 || opsDone.Load() < 10 {
		t.Errorf("%d events, %d cancels and retries: the writers did too little for the test to mean much", len(want), opsDone.Load())
	}
	if client.conns["Last-Event-ID"] < 5 || client.conns["?since="] != 1 || client.conns["Last-Event-ID with ?since=0"] != 1 || client.cut == 0 {
		t.Errorf("the client resumed too little for the test to mean much: connections %v, %d cut mid-event", client.conns, client.cut)
	}
	if t.Failed() {
		log := strings.Split(strings.TrimSpace(workerErr.String()), "\n")
		t.Logf("worker log, its last lines:\n%s", strings.Join(log[max(0, len(log)-30):], "\n"))
	}
}

// TestServeEventsPing: GET /events without since starts at the current
// end (its opening id is the last seq), sends the next event, and a
// comment ping every CQ_SERVE_PING while nothing happens; a bad since
// or Last-Event-ID is a 400.
func TestServeEventsPing(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--", "true")
	e.ok("enqueue", "--hold", "--", "true")
	srv := startStreamServer(t, e, "CQ_SERVE_PING=200ms")
	before := eventLines(e, 0)
	end := seqOfLine(t, before[len(before)-1])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := srv.openSSE(ctx, "/events", "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	r, err := st.next(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.hasID || r.id != strconv.FormatInt(end, 10) || len(r.data) > 0 {
		t.Fatalf("GET /events opened with %+v, want the id %d (the last seq) alone", r, end)
	}
	// Two pings in a row while nothing happens: a beat, not a one-off,
	// and CQ_SERVE_PING's, well before the default 15 s.
	opened := time.Now()
	for pings := 0; pings < 2; {
		r, err := st.next(nil)
		if err != nil {
			t.Fatalf("waiting for a ping: %v", err)
		}
		if len(r.data) > 0 || r.hasID || len(r.comments) != 1 || r.comments[0] != "ping" {
			t.Fatalf("got %+v while the store stood still, want a ping comment", r)
		}
		pings++
	}
	if d := time.Since(opened); d > 10*time.Second {
		t.Fatalf("two pings took %v: not CQ_SERVE_PING's 200ms", d)
	}
	id := strings.TrimSpace(e.ok("enqueue", "--", "true"))
	after := eventLines(e, end)
	for _, line := range after {
		var r sseRecord
		for len(r.data) == 0 {
			if r, err = st.next(nil); err != nil {
				t.Fatalf("waiting for %s: %v", line, err)
			}
		}
		if _, err := sseSeq(r); err != nil || r.data[0] != line {
			t.Fatalf("GET /events sent %+v (%v), want %s", r, err, line)
		}
	}
	if len(after) == 0 || !strings.Contains(after[0], id) {
		t.Errorf("the events after the end, %q, do not start with the new task %s", after, id)
	}

	// HEAD gets the headers and ends: the connection, reused, serves the
	// next request.
	hctx, hcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer hcancel()
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		req, err := http.NewRequestWithContext(hctx, method, srv.base+"/state", nil)
		if method == http.MethodHead {
			req, err = http.NewRequestWithContext(hctx, method, srv.base+"/events", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s after HEAD /events: %v", method, req.URL.Path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %s", method, req.URL.Path, resp.Status)
		}
	}

	srv.wantHTTPError("/events?since=x", 400, exitError)
	srv.wantHTTPError("/events?since=-1", 400, exitError)
	srv.wantHTTPError("/events", 400, exitError, "Last-Event-ID", "seven")
	// The header wins: a bad ?since= beside a good header is not read.
	first := strconv.FormatInt(seqOfLine(t, before[0]), 10)
	st2, err := srv.openSSE(ctx, "/events?since=x", first)
	if err != nil {
		t.Fatalf("GET /events?since=x with Last-Event-ID %s: %v", first, err)
	}
	defer st2.close()
	if r, err := st2.next(nil); err != nil || r.id != first {
		t.Fatalf("GET /events?since=x with Last-Event-ID %s opened with %+v (%v), want the id %s", first, r, err, first)
	}
	if r, err := st2.next(nil); err != nil || len(r.data) != 1 || r.data[0] != before[1] {
		t.Fatalf("GET /events?since=x with Last-Event-ID %s sent %+v (%v), want %s", first, r, err, before[1])
	}
}

// TestServeEventsSIGTERM: SIGTERM to cq serve while a client holds a
// GET /events stream ends the stream and cq serve, with exit 0, at once.
func TestServeEventsSIGTERM(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	srv := startStreamServer(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := srv.openSSE(ctx, "/events?since=0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if r, err := st.next(nil); err != nil || r.id != "0" {
		t.Fatalf("GET /events?since=0 opened with %+v (%v)", r, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, st.rd)
		ended <- err
	}()
	start := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	const prompt = 4 * time.Second
	select {
	case err := <-ended:
		t.Logf("the stream ended %v after SIGTERM (%v)", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(prompt):
		t.Fatalf("the stream is still open %v after SIGTERM", prompt)
	}
	select {
	case <-srv.done:
		if srv.code != 0 {
			t.Errorf("cq serve exited %d after SIGTERM, want 0; stderr:\n%s", srv.code, srv.stderr.String())
		}
		t.Logf("cq serve exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(prompt):
		t.Fatalf("cq serve still runs %v after SIGTERM", prompt)
	}
}

// TestServeState: GET /state is cq state's output, byte for byte, for the
// same store (?all=1 and ?queue=Q as --all and --queue Q), and
// GET /events?since= its seq continues it: the snapshot with those
// events applied is the store's next snapshot.
func TestServeState(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, true)
	e.ok("queue", "set", "a", "--concurrency", "2", "--timeout", "1m")
	for i := 0; i < 3; i++ {
		e.ok("enqueue", "--queue", "a", "--priority", "P1", "--", "echo", fmt.Sprint(i))
	}
	held := strings.TrimSpace(e.ok("enqueue", "--queue", "b", "--hold", "--key", "k", "--", "true"))
	gone := strings.TrimSpace(e.ok("enqueue", "--queue", "b", "--", "true"))
	e.ok("cancel", gone)
	srv := startStreamServer(t, e)

	for _, c := range []struct {
		path string
		args []string
	}{
		{"/state", []string{"state"}},
		{"/state?all=1", []string{"state", "--all"}},
		{"/state?all", []string{"state", "--all"}},
		{"/state?queue=a", []string{"state", "--queue", "a"}},
		{"/state?queue=b&all=true", []string{"state", "--queue", "b", "--all"}},
		{"/state?queue=none", []string{"state", "--queue", "none"}},
	} {
		got := srv.getOK(c.path, "application/json")
		if want := e.ok(c.args...); got != want {
			t.Errorf("GET %s:\n%s\ncq %s:\n%s", c.path, got, strings.Join(c.args, " "), want)
		}
	}
	srv.wantHTTPError("/state?queue=", 400, exitError)
	srv.wantHTTPError("/state?queue=no%20such", 400, exitError)
	srv.wantHTTPError("/state?all=perhaps", 400, exitError)

	var snap stateSnapshot
	if err := json.Unmarshal([]byte(srv.getOK("/state?all=1", "application/json")), &snap); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := srv.openSSE(ctx, fmt.Sprintf("/events?since=%d", snap.Seq), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	// Changes after the snapshot: each is in the stream, once, in order.
	added := strings.TrimSpace(e.ok("enqueue", "--queue", "b", "--", "true"))
	e.ok("release", held)
	e.ok("retry", gone)
	e.ok("queue", "pause", "a")
	want := eventLines(e, snap.Seq)
	var evs []cqEvent
	for _, line := range want {
		var r sseRecord
		for len(r.data) == 0 {
			if r, err = st.next(nil); err != nil {
				t.Fatalf("waiting for %s: %v", line, err)
			}
		}
		if _, err := sseSeq(r); err != nil || r.data[0] != line {
			t.Fatalf("GET /events?since=%d sent %+v (%v), want %s", snap.Seq, r, err, line)
		}
		var ev cqEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 || evs[0].Kind != "task.created" || strOf(evs[0].TaskID) != added {
		t.Errorf("the events after the snapshot %v do not start with the new task %s's creation", evs, added)
	}
	var next stateSnapshot
	if err := json.Unmarshal([]byte(srv.getOK("/state?all=1", "application/json")), &next); err != nil {
		t.Fatal(err)
	}
	if next.Seq != evs[len(evs)-1].Seq {
		t.Errorf("the next snapshot's seq is %d, the last event's %d", next.Seq, evs[len(evs)-1].Seq)
	}
	if d := diffViews(rebuild(snap.view(), evs, next.Seq), next.view()); d != "" {
		t.Errorf("the snapshot (seq %d) with the events after it differs from the next (seq %d):\n%s", snap.Seq, next.Seq, d)
	}
}

// TestServeLogs: GET /tasks/{id}/logs prints what cq logs prints (stdout,
// ?stderr=1, ?both=1, ?run=N, ?tail=N), 404 where cq logs exits 4 (no
// such task, no run yet), and with ?follow=1 waits for the run, streams
// its output as it is written, and ends when the run ends.
func TestServeLogs(t *testing.T) {
	t.Parallel()
	e := wkNewEnv(t)
	gate := e.path("go")
	script := fmt.Sprintf(`echo one; echo err1 >&2; while [ ! -e %s ]; do sleep 0.02; done; echo two; printf 'err2' >&2`, gate)
	id := strings.TrimSpace(e.ok("enqueue", "--queue", "logs", "--shell", script))
	never := strings.TrimSpace(e.ok("enqueue", "--queue", "logs", "--hold", "--", "true"))
	srv := startStreamServer(t, e.cqEnv)

	// No run yet: 404 and cq logs' message, as it exits 4.
	_, cliErr, code := e.run("logs", id)
	if code != exitNotFound {
		t.Fatalf("cq logs on a task with no run: exit %d, want %d", code, exitNotFound)
	}
	if msg := srv.wantHTTPError("/tasks/"+id+"/logs", 404, exitNotFound); "cq: "+msg+"\n" != cliErr {
		t.Errorf("GET /tasks/%s/logs says %q, cq logs %q", id, msg, cliErr)
	}
	srv.wantHTTPError("/tasks/nosuchtask/logs", 404, exitNotFound)
	srv.wantHTTPError("/tasks/"+id+"/logs?run=0", 400, exitError)
	srv.wantHTTPError("/tasks/"+id+"/logs?tail=-2", 400, exitError)
	srv.wantHTTPError("/tasks/"+id+"/logs?stderr=1&both=1", 400, exitError)
	srv.wantHTTPError("/tasks/"+id+"/logs?follow=sure", 400, exitError)
	// A follow of a task that ended without a run: 404, as cq logs
	// --follow exits 4 then.
	e.ok("cancel", never)
	srv.wantHTTPError("/tasks/"+never+"/logs?follow=1", 404, exitNotFound)

	// Follow from before the run exists.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.base+"/tasks/"+id+"/logs?follow=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var body syncBuffer
	type result struct {
		resp *http.Response
		err  error // of the request, or of reading its body
	}
	headers, ended := make(chan result, 1), make(chan error, 1)
	go func() {
		resp, err := srv.client.Do(req)
		headers <- result{resp, err}
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, err = io.Copy(&body, resp.Body)
		ended <- err
	}()
	w := e.startWorker("w", "--queue", "logs")
	var res result
	select {
	case res = <-headers:
	case <-ctx.Done():
		t.Fatal("GET ?follow=1: no response")
	}
	if res.err != nil {
		t.Fatalf("GET ?follow=1: %v", res.err)
	}
	if res.resp.StatusCode != 200 || res.resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("GET ?follow=1: %s, Content-Type %q", res.resp.Status, res.resp.Header.Get("Content-Type"))
	}
	e.eventually(30*time.Second, "the first line, streamed", func() (bool, string) {
		return body.String() == "one\n", fmt.Sprintf("%q", body.String())
	})
	select {
	case err := <-ended:
		t.Fatalf("the follow ended (%v) while the run waits for %s", err, gate)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the follow ended with %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the follow did not end with the run; got %q", body.String())
	}
	if got := body.String(); got != "one\ntwo\n" {
		t.Errorf("GET ?follow=1 printed %q, want %q", got, "one\ntwo\n")
	}
	e.waitTask(id, "done", 30*time.Second)

	// The ended run: each option as cq logs prints it.
	for _, c := range []struct {
		query string
		args  []string
		want  string
	}{
		{"", nil, "one\ntwo\n"},
		{"?stderr=1", []string{"--stderr"}, "err1\nerr2"},
		{"?both=1", []string{"--both"}, "one\ntwo\nerr1\nerr2\n"},
		{"?run=1&tail=1", []string{"--run", "1", "--tail", "1"}, "two\n"},
		{"?stderr=true&follow=1", []string{"--stderr", "--follow"}, "err1\nerr2"},
	} {
		got := srv.getOK("/tasks/"+id+"/logs"+c.query, "text/plain")
		cli := e.ok(append(append([]string{"logs"}, c.args...), id)...)
		if got != c.want || cli != c.want {
			t.Errorf("GET /tasks/ID/logs%s printed %q, cq logs %s %q; want %q", c.query, got, strings.Join(c.args, " "), cli, c.want)
		}
	}
	srv.wantHTTPError("/tasks/"+id+"/logs?run=2", 404, exitNotFound)
	w.stop()
}
