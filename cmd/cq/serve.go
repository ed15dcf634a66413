package main

// cq serve: the HTTP gateway (docs/serve.md). This file holds the
// command, the server, its middleware (access log, token, CORS, origin
// checks) and the error writers every endpoint uses; serve_tasks.go and
// serve_queues.go hold the endpoints over tasks, and over queues,
// workers and health; serve_events.go the streams (GET /events, /state,
// /tasks/{id}/logs).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cq-dev/cq/cmd/cq/internal/oneproc"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/cobra"
)

const (
	// gwDefaultListen is where cq serve listens unless told otherwise:
	// loopback only.
	gwDefaultListen = "127.0.0.1:5680"
	// gwSpecLimit bounds a request body of one task spec, and every
	// other request body; gwBatchLimit a JSONL batch.
	gwSpecLimit  = 1 << 20
	gwBatchLimit = 16 << 20
	// gwShutdownWait is how long a stopping server lets requests in
	// flight finish before it closes their connections.
	gwShutdownWait = 5 * time.Second
	// The server's timeouts: a client that sends its request slowly is
	// cut off; nothing bounds a response (the streams are long-lived).
	gwReadHeaderTimeout = 10 * time.Second
	gwReadTimeout       = 30 * time.Second
	gwIdleTimeout       = 2 * time.Minute
	gwMaxHeaderBytes    = 64 << 10
	// gwPGConns is how many PostgreSQL connections the server holds at
	// most (a command holds 4): requests wait for a free one beyond that.
	gwPGConns = 16
)

func newServeCmd(app *App) *cobra.Command {
	var listen, tokenFile, cors, logFormat string
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--token-file FILE] [--cors ORIGIN]",
		Short: "Serve the store over HTTP: add and change tasks, read them, follow events",
		Long: `Serves the store over HTTP (docs/serve.md): POST /tasks (one JSON spec, or
JSONL for a batch), GET /tasks, GET /tasks/{id}, GET /tasks/{id}/logs,
POST /tasks/{id}/cancel|retry|hold|release, POST /runs/{id}/answer,
GET /queues, POST /queues/{name}, GET /workers, GET /health, GET /metrics,
GET /state and GET /events (Server-Sent Events). Errors are JSON
{"error": "…", "code": N}, N the exit code the command line would give.

It listens on loopback (127.0.0.1:5680) unless --listen says otherwise;
any other address needs --token-file. With a token, every write (POST)
needs "Authorization: Bearer TOKEN", and on an address other than
loopback every read too. The token file must be readable by its owner
only.

It logs one JSON line per request on stderr (text on a terminal), after
a first line "serve.started" with the address it listens on. SIGINT or
SIGTERM stops it: requests in flight get up to 5s, then exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch logFormat {
			case "", "text", "json":
			default:
				return usageErr("--log-format: invalid format %q (want text or json)", logFormat)
			}
			if listen == "" {
				return usageErr("--listen is empty (leave it out for %s)", gwDefaultListen)
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageErr("--listen %q: want HOST:PORT, such as %s", listen, gwDefaultListen)
			}
			if cmd.Flags().Changed("cors") {
				if err := checkCORSOrigin(cors); err != nil {
					return err
				}
			}
			var token []byte
			if cmd.Flags().Changed("token-file") {
				var err error
				if token, err = readTokenFile(tokenFile); err != nil {
					return err
				}
			}
			if cors == "*" && token == nil {
				return usageErr("--cors '*' lets every web site send requests: it needs --token-file")
			}
			here, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("cannot read the current folder: %w", err)
			}
			if oneproc.Saved > 0 {
				runtime.GOMAXPROCS(oneproc.Saved) // requests side by side: every P back (see oneproc)
			}
			survivePipeClose()
			ctx := cmd.Context()
			app.pgConns = gwPGConns
			st, err := app.Store(ctx)
			if err != nil {
				return err
			}
			home, err := app.Home()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			defer ln.Close()
			loopback := isLoopbackListener(ln)
			if !loopback && token == nil {
				return usageErr("--listen %s is not a loopback address: give --token-file (every request then needs the token)", listen)
			}
			handler := app.logHandler(logFormat)
			s := &gwServer{
				app: app, st: st, log: slog.New(handler), loopback: loopback, cors: cors,
				here: here, home: home,
			}
			if token != nil {
				sum := sha256.Sum256(token)
				s.tokenSum = &sum
			}
			if s.hub, err = newEventHub(ctx, st, s.log); err != nil {
				return st.Backend().Explain(err)
			}
			s.routes()
			return s.run(ctx, ln, handler)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", gwDefaultListen, "address to listen on, HOST:PORT (any but loopback needs --token-file)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token that writes (and reads, off loopback) need; mode 0600")
	f.StringVar(&cors, "cors", "", "let web pages of ORIGIN (such as https://ops.example.com) call the server")
	f.StringVar(&logFormat, "log-format", "", "log as text or json (default: text on a terminal, else json)")
	return cmd
}

// gwServer is cq serve's HTTP handler: the middleware, then its mux.
type gwServer struct {
	app *App
	st  *queue.Store
	log *slog.Logger
	// hub reads the event log for every GET /events stream.
	hub *eventHub
	// intake stores the tasks of POST /tasks in groups.
	intake *intake
	// tokenSum is the SHA-256 of the token; nil when there is none.
	tokenSum *[sha256.Size]byte
	// loopback: the server listens on a loopback address only.
	loopback bool
	// cors is the origin of --cors, "" for none.
	cors string
	// here is the folder a spec without a cwd runs in; home the home
	// folder (its spool).
	here, home string
	mux        *http.ServeMux
}

// routes registers every endpoint.
func (s *gwServer) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /tasks", s.postTasks)
	m.HandleFunc("GET /tasks", s.getTasks)
	m.HandleFunc("GET /tasks/{id}", s.getTask)
	for _, op := range []string{"cancel", "retry", "hold", "release"} {
		m.HandleFunc("POST /tasks/{id}/"+op, s.taskOp(op))
	}
	m.HandleFunc("POST /runs/{id}/answer", s.postAnswer)
	m.HandleFunc("GET /queues", s.getQueues)
	m.HandleFunc("POST /queues/{name}", s.postQueue)
	m.HandleFunc("GET /workers", s.getWorkers)
	m.HandleFunc("GET /schedules", s.getSchedules)
	m.HandleFunc("GET /schedules/{name}", s.getSchedule)
	m.HandleFunc("GET /health", s.getHealth)
	m.HandleFunc("GET /metrics", s.getMetrics)
	// The streams (serve_events.go).
	m.HandleFunc("GET /events", serveEvents(s.st, s.hub))
	m.HandleFunc("GET /state", serveState(s.st))
	m.HandleFunc("GET /tasks/{id}/logs", serveLogs(s.app, s.st))
	// The dashboard (serve_dashboard.go): the page at / alone, so that
	// any other unknown path is still a JSON 404.
	dash := serveDashboard()
	m.Handle("GET /{$}", dash)
	m.Handle("GET /dashboard/", dash)
	s.mux = m
}

// run serves on ln until ctx ends (SIGINT, SIGTERM), then shuts down:
// the requests' contexts end at once, so that streams stop; requests in
// flight get gwShutdownWait to finish.
func (s *gwServer) run(ctx context.Context, ln net.Listener, handler slog.Handler) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: gwReadHeaderTimeout,
		ReadTimeout:       gwReadTimeout,
		IdleTimeout:       gwIdleTimeout,
		MaxHeaderBytes:    gwMaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	s.log.Info("serve.started", "addr", ln.Addr().String())
	go s.hub.run(base)
	// The intake outlives the requests, which may still hand it a task
	// while the server shuts down.
	ictx, stopIntake := context.WithCancel(context.WithoutCancel(ctx))
	defer stopIntake()
	s.intake = newIntake(ictx, s.st)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), gwShutdownWait)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("serve.shutdown", "error", "requests still running after "+gwShutdownWait.String()+": closed")
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("serve.shutdown", "error", err.Error())
	}
	s.log.Info("serve.stopped")
	return nil
}

// ServeHTTP runs the middleware, then the endpoint: the access log line,
// CORS, the Host, token and Origin checks, and JSON for an unknown path
// or a method an endpoint does not take.
func (s *gwServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w := &gwStatusWriter{ResponseWriter: rw}
	defer func() { s.logRequest(r, w, time.Since(start)) }()
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if s.cors != "" {
		h.Set("Access-Control-Allow-Origin", s.cors)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			// A preflight: it carries no token, and says only what
			// the real request may send.
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
	if !write && dashboardAsset(r.URL.Path) {
		// The page and its scripts are the same for everyone and hold no
		// data: a browser loads them without the token, which the page
		// then asks for and sends with each of its own requests.
		s.mux.ServeHTTP(w, r)
		return
	}
	// The token is needed for a write, and off loopback for anything; a
	// token sent where none is needed must be right all the same.
	authed := false
	if s.tokenSum != nil && (write || !s.loopback || r.Header.Get("Authorization") != "") {
		var why string
		if authed, why = s.checkToken(r); !authed {
			h.Set("WWW-Authenticate", "Bearer")
			writeHTTPJSON(w, http.StatusUnauthorized, gwErrorBody{Error: why, Code: exitError})
			return
		}
	}
	if !authed && !loopbackHost(r.Host) {
		// Let in without a token, so on loopback: a name that is not
		// loopback's is a web page's DNS rebinding, or a proxy, which
		// must send the token.
		writeHTTPJSON(w, http.StatusForbidden, gwErrorBody{
			Error: fmt.Sprintf("Host %q is not a loopback address: send the token (--token-file), or name the server by a loopback address", r.Host),
			Code:  exitError})
		return
	}
	if write && !s.originAllowed(r) {
		writeHTTPJSON(w, http.StatusForbidden, gwErrorBody{
			Error: fmt.Sprintf("a web page of %s may not write here (cq serve --cors ORIGIN lets one origin)", r.Header.Get("Origin")),
			Code:  exitError})
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.noRoute(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// noRoute answers a request no endpoint takes: 404, or 405 (with Allow)
// when the path is an endpoint's but not the method, as JSON.
func (s *gwServer) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &gwRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == http.StatusMethodNotAllowed {
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeHTTPJSON(w, http.StatusMethodNotAllowed, gwErrorBody{
			Error: fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow), Code: exitError})
		return
	}
	writeHTTPJSON(w, http.StatusNotFound, gwErrorBody{
		Error: fmt.Sprintf("%s %s: no such endpoint (see docs/serve.md)", r.Method, r.URL.Path), Code: exitError})
}

// logRequest writes the access log line of a request: never its
// headers (the token) nor its query.
func (s *gwServer) logRequest(r *http.Request, w *gwStatusWriter, d time.Duration) {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("remote", r.RemoteAddr),
	}
	level := slog.LevelInfo
	if w.err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", errorText(w.err)))
	}
	s.log.LogAttrs(context.Background(), level, "http.request", attrs...)
}

// checkToken reports whether r carries the token, and if not why.
func (s *gwServer) checkToken(r *http.Request) (bool, string) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return false, "this request needs the token: send Authorization: Bearer TOKEN"
	}
	scheme, tok, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return false, "the Authorization header must be Bearer TOKEN"
	}
	// Both sides hashed: the comparison takes the same time whatever
	// the length of what was sent.
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		return false, "wrong token"
	}
	return true, ""
}

// originAllowed reports whether a write may come from r's Origin: none
// (not a browser), the --cors origin, or this server's own pages. A web
// page elsewhere could otherwise make a browser post tasks (commands to
// run) to a server on its user's loopback.
func (s *gwServer) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || (s.cors != "" && (s.cors == "*" || o == s.cors)) {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// loopbackHost reports whether the Host of a request names loopback: an
// address of it, localhost, or a name under .localhost (browsers keep
// those on loopback); empty (HTTP/1.0) too.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return true
	}
	lower := strings.ToLower(strings.TrimSuffix(host, "."))
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLoopbackListener reports whether ln accepts connections on a
// loopback address only (0.0.0.0 and :: are every address).
func isLoopbackListener(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// readTokenFile reads the bearer token: the file's content, trimmed. A
// file others may read (or write), an empty one, or a token that cannot
// be sent in a header is refused.
func readTokenFile(path string) ([]byte, error) {
	if path == "" {
		return nil, usageErr("--token-file is empty (leave it out for no token)")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("--token-file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, usageErr("--token-file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, usageErr("--token-file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, usageErr("--token-file %s has mode %04o: others may read it; make it its owner's only (chmod 600 %s)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, usageErr("--token-file: %v", err)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) == 0 {
		return nil, usageErr("--token-file %s is empty", path)
	}
	for _, c := range tok {
		if c < 0x21 || c == 0x7f {
			return nil, usageErr("--token-file %s: the token must be one word of printable characters (no spaces or line breaks)", path)
		}
	}
	return tok, nil
}

// checkCORSOrigin checks --cors: an origin (scheme://host[:port], no
// path), "*" or "null".
func checkCORSOrigin(o string) error {
	if o == "*" || o == "null" {
		return nil
	}
	u, err := url.Parse(o)
	if o == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return usageErr("--cors %q: want an origin such as https://ops.example.com (scheme, host and port only), or *", o)
	}
	if u.Path == "/" {
		return usageErr("--cors %q: an origin has no path: %s://%s", o, u.Scheme, u.Host)
	}
	return nil
}

// ---- responses ----

// gwErrorBody is the JSON of every error: the message the command line
// would print (without "cq: "), and its exit code; holder and
// holder_state name the task holding a unique key.
type gwErrorBody struct {
	Error       string `json:"error"`
	Code        int    `json:"code"`
	Holder      string `json:"holder,omitempty"`
	HolderState string `json:"holder_state,omitempty"`
}

// writeHTTPError answers with err as JSON {"error", "code"}: code the
// exit code cq would give; the HTTP status 400 for bad input, 409 for a
// conflict, 404 for not found, 413 for a body too large, 503 when the
// request's context ended (the server stops), else 500. A unique-key
// conflict names the holder ("holder", "holder_state").
func writeHTTPError(w http.ResponseWriter, err error) {
	status := httpStatusOf(err)
	body := gwErrorBody{Error: errorText(err), Code: codeOf(err)}
	var qe *queue.Error
	if errors.As(err, &qe) && qe.Existing != "" {
		body.Holder, body.HolderState = qe.Existing, qe.ExistingState
	}
	if sw, ok := w.(*gwStatusWriter); ok && status >= http.StatusInternalServerError {
		sw.err = err // for the access log
	}
	writeHTTPJSON(w, status, body)
}

// httpStatusOf is the HTTP status of an error (see writeHTTPError).
func httpStatusOf(err error) int {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return http.StatusRequestEntityTooLarge
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		switch ee.code {
		case exitError:
			return http.StatusBadRequest
		case exitConflict:
			return http.StatusConflict
		case exitNotFound:
			return http.StatusNotFound
		}
		return http.StatusInternalServerError
	}
	var qe *queue.Error
	if errors.As(err, &qe) {
		switch qe.Kind {
		case queue.Invalid:
			return http.StatusBadRequest
		case queue.Conflict:
			return http.StatusConflict
		case queue.NotFound:
			return http.StatusNotFound
		}
	}
	return http.StatusInternalServerError
}

// writeHTTPJSON answers with status and v as JSON, as cq -o json prints
// it (indented).
func writeHTTPJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = writeJSON(&buf, gwErrorBody{Error: "cannot encode the response: " + err.Error(), Code: exitError})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers with err, in the words the command line would use for a
// fault of the store.
func (s *gwServer) fail(w http.ResponseWriter, err error) {
	writeHTTPError(w, s.st.Backend().Explain(err))
}

// readBody reads a request body of at most limit bytes; a larger one is
// an error for 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if sw, ok := w.(*gwStatusWriter); ok {
		// net/http's own writer, told of a body too large, closes the
		// connection after the answer rather than read the rest.
		w = sw.ResponseWriter
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, fmt.Errorf("request body too large: the limit is %d bytes: %w", limit, mb)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return body, nil
}

// gwStatusWriter records the status a handler answered with (and the
// error of a 5xx) for the access log. It passes Flush on, and Unwrap
// lets http.ResponseController reach the connection.
type gwStatusWriter struct {
	http.ResponseWriter
	status int
	err    error
}

func (w *gwStatusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gwStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *gwStatusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *gwStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// gwRecorder takes what the mux's own 404 and 405 handlers write, so
// that the answer can be JSON.
type gwRecorder struct {
	header http.Header
	status int
}

func (r *gwRecorder) Header() http.Header { return r.header }

func (r *gwRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *gwRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}
