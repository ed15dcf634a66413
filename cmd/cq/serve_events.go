package main

// The streaming endpoints of cq serve (docs/serve-streams.md): GET /events
// (Server-Sent Events of the event log), GET /state (cq state's snapshot)
// and GET /tasks/{id}/logs (cq logs). Each runs the code of its command
// (followEvents, writeStoreState, printLogs), so that the gateway and the
// command line cannot drift apart; serve.go registers them.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// streamPingDefault is how often GET /events sends a comment, so that
// proxies and clients see a live connection while no event comes.
const streamPingDefault = 15 * time.Second

// streamPingEnv, a duration, replaces streamPingDefault: for the tests,
// which cannot wait 15 s for a ping.
const streamPingEnv = "CQ_SERVE_PING"

// streamWriteWait is how long one write of a streamed response may take.
// A client that stops reading is dropped after that long rather than
// hold its handler (and, for GET /state, a snapshot of the store) for
// good.
const streamWriteWait = 30 * time.Second

// streamPing is the ping interval: $CQ_SERVE_PING when it is a positive
// duration, else streamPingDefault.
func streamPing() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(streamPingEnv)); err == nil && d > 0 {
		return d
	}
	return streamPingDefault
}

// serveEvents is GET /events: the event log as Server-Sent Events, each
// event as `id: SEQ` and `data: ` the line cq events prints for it, from
// the event after Last-Event-ID (or ?since=; the header wins, as it is
// what an EventSource sends when it reconnects to the URL it was given),
// else from the current end, as cq events --follow. The events come from
// the hub (serve_hub.go), or from the store for a stream behind its
// window. It ends when the request's context does.
func serveEvents(st *queue.Store, hub *eventHub) http.HandlerFunc {
	ping := streamPing()
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		since, given, err := eventsSince(r)
		if err != nil {
			writeHTTPError(w, err)
			return
		}
		if !given {
			if since, err = st.LastSeq(ctx); err != nil {
				streamFail(w, st, err)
				return
			}
		}
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		if r.Method == http.MethodHead {
			// The headers alone: a stream nobody reads would run on.
			return
		}
		sw := newStreamWriter(w)
		b := bufio.NewWriter(sw)
		flush := func() error {
			if err := b.Flush(); err != nil {
				return err
			}
			return sw.Flush()
		}
		// The stream opens with where it starts: an id without data is no
		// event (an EventSource dispatches nothing), but it is the id a
		// reconnection sends back, so that a client that came in at the
		// end and is cut off before any event resumes from there rather
		// than from a later end, missing what came between.
		fmt.Fprintf(b, "id: %d\n\n", since)
		if flush() != nil {
			return
		}
		err = streamEvents(ctx, st, hub, since, b, flush, ping)
		if err != nil && ctx.Err() == nil {
			// Too late for an HTTP error: a comment says why the stream
			// ends, and the client reconnects from its last id.
			fmt.Fprintf(b, ": error: %s\n\n", errorText(st.Backend().Explain(err)))
			_ = flush()
		}
	}
}

// streamEvents writes the events after since to b until ctx ends: from
// the hub's window, or from the store while the stream is behind it;
// flushed whenever it has caught up, with a ping every ping.
func streamEvents(ctx context.Context, st *queue.Store, hub *eventHub, since int64, b *bufio.Writer, flush func() error, ping time.Duration) error {
	pings := time.NewTicker(ping)
	defer pings.Stop()
	for {
		frames, behind, base, wake := hub.after(since, eventsPage)
		if behind {
			evs, err := st.Events(ctx, since, eventsPage)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			for _, e := range evs {
				if err := writeSSEEvent(b, e); err != nil {
					return err
				}
				since = e.Seq
			}
			if len(evs) < eventsPage {
				// The read began after the hub had every event up to
				// base: one it did not return is not in the log.
				since = max(since, base)
			}
			continue
		}
		for _, f := range frames {
			if _, err := b.Write(f.frame); err != nil {
				return err
			}
			since = f.seq
		}
		if len(frames) == eventsPage {
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-pings.C:
			if _, err := b.WriteString(": ping\n\n"); err != nil {
				return err
			}
		}
	}
}

// writeSSEEvent writes e as a stream sends it: `id: SEQ`, `data: ` the
// line cq events prints for it (one line: JSON escapes every line break
// in a string), and the blank line that ends an event.
func writeSSEEvent(w io.Writer, e queue.Event) error {
	if _, err := fmt.Fprintf(w, "id: %d\ndata: ", e.Seq); err != nil {
		return err
	}
	if err := writeJSONLine(w, e); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// eventsSince is where GET /events starts: after the Last-Event-ID
// header's seq, else after ?since=; given false when neither is there.
func eventsSince(r *http.Request) (since int64, given bool, err error) {
	what, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		q := r.URL.Query()
		if !q.Has("since") {
			return 0, false, nil
		}
		what, v = "since", q.Get("since")
	}
	since, err = strconv.ParseInt(v, 10, 64)
	if err != nil || since < 0 {
		return 0, false, streamBadParam("%s: want a seq, 0 or more, not %q", what, v)
	}
	return since, true, nil
}

// serveState is GET /state: cq state's JSON (?all=1: cq state --all;
// ?queue=Q: --queue Q), the tasks streamed as they are read.
func serveState(st *queue.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var f queue.StateFilter
		var err error
		if f.All, err = streamBool(q, "all"); err != nil {
			writeHTTPError(w, err)
			return
		}
		if q.Has("queue") {
			f.Queue = q.Get("queue")
			if err := checkStateQueue(f.Queue, "queue"); err != nil {
				writeHTTPError(w, err)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		sw := newStreamWriter(w)
		streamEnd(w, sw, st, writeStoreState(r.Context(), sw, false, st, f))
	}
}

// serveLogs is GET /tasks/{id}/logs: the output of the task's latest run
// as cq logs prints it, as text, with cq logs' options as parameters:
// ?stderr=1, ?both=1, ?run=N, ?tail=N, and ?follow=1, which streams the
// output until the run ends (waiting for the run first). A task without
// that run is 404, as cq logs exits 4. When the store keeps only the end
// of the output (a run of another host), the trailer Cq-Notice says so.
func serveLogs(app *App, st *queue.Store) http.HandlerFunc {
	// The runs folder is this host's, as for cq logs.
	home, homeErr := app.Home()
	return func(w http.ResponseWriter, r *http.Request) {
		o, err := logsParams(r.URL.Query())
		if err == nil {
			err = homeErr
		}
		// HEAD gets the headers of the output as it stands.
		o.follow = o.follow && r.Method != http.MethodHead
		if err != nil {
			writeHTTPError(w, err)
			return
		}
		ctx := r.Context()
		t, err := st.Get(ctx, r.PathValue("id"))
		if err != nil {
			streamFail(w, st, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		sw := newStreamWriter(w)
		out := logsOut{w: sw, note: func(msg string) { h.Add(http.TrailerPrefix+"Cq-Notice", msg) }}
		if o.follow {
			h.Set("X-Accel-Buffering", "no")
			out.flush = sw.Flush
		}
		streamEnd(w, sw, st, printLogs(ctx, st, home, t, o, out))
	}
}

// logsParams reads GET /tasks/{id}/logs' parameters, checked as cq logs
// checks its flags.
func logsParams(q url.Values) (logsOpts, error) {
	o := logsOpts{tail: -1}
	var err error
	for _, b := range []struct {
		name string
		v    *bool
	}{{"stderr", &o.stderr}, {"both", &o.both}, {"follow", &o.follow}} {
		if *b.v, err = streamBool(q, b.name); err != nil {
			return o, err
		}
	}
	if o.stderr && o.both {
		return o, streamBadParam("give stderr or both, not both")
	}
	if q.Has("run") {
		if o.run, err = strconv.Atoi(q.Get("run")); err != nil || o.run < 1 {
			return o, streamBadParam("run: want an attempt number, 1 or more")
		}
	}
	if q.Has("tail") {
		if o.tail, err = strconv.Atoi(q.Get("tail")); err != nil || o.tail < 0 {
			return o, streamBadParam("tail: want a number of lines, 0 or more")
		}
	}
	return o, nil
}

// streamBool is the boolean parameter name: false when absent, true when
// given empty (?all), else its value as strconv.ParseBool reads it (1,
// true, 0, false, …).
func streamBool(q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return false, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, streamBadParam("%s: want 1 or 0, not %q", name, v)
	}
	return b, nil
}

// streamBadParam is a bad parameter: an error of kind Invalid (400).
func streamBadParam(format string, a ...any) error {
	return &queue.Error{Kind: queue.Invalid, Msg: fmt.Sprintf(format, a...)}
}

// streamFail answers with err, in the words the command line would use
// for a fault of the store.
func streamFail(w http.ResponseWriter, st *queue.Store, err error) {
	writeHTTPError(w, st.Backend().Explain(err))
}

// streamEnd ends a streamed response whose writing returned err: an
// error before anything was sent is answered as any error; after, when
// the response can no longer say it, the response is cut off (its end
// missing, the client sees it broken) rather than pass for complete.
func streamEnd(w http.ResponseWriter, sw *streamWriter, st *queue.Store, err error) {
	switch {
	case err == nil:
	case !sw.sent:
		streamFail(w, st, err)
	default:
		panic(http.ErrAbortHandler)
	}
}

// streamWriter writes a streamed response, moving the connection's write
// deadline streamWriteWait ahead of each write and flush: whatever the
// server's own write timeout, a stream lasts as long as its client reads.
type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// sent: the status line has gone (something was written or flushed).
	sent bool
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.deadline()
	s.sent = true
	return s.w.Write(p)
}

// Flush sends what was written at once.
func (s *streamWriter) Flush() error {
	s.deadline()
	s.sent = true
	return s.rc.Flush()
}

// deadline moves the write deadline ahead; a writer that cannot take one
// (a test's recorder) writes without.
func (s *streamWriter) deadline() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
}
