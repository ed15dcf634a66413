package main

// cq serve's endpoints over tasks (docs/serve.md): POST /tasks, GET
// /tasks, GET /tasks/{id}, POST /tasks/{id}/cancel|retry|hold|release,
// POST /runs/{id}/answer. Each runs what the command line runs.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/spf13/pflag"
)

// postTasks is POST /tasks: one task spec as JSON (cq enqueue --batch's
// line), or JSONL for a batch (all or nothing), created and enqueued as
// cq enqueue does. 201 with the task as cq show -o json prints it (a
// batch: an array of {id, state}, as cq enqueue --batch -o json); 200
// when the spec's id is stored already with the same spec (every one of
// a batch's), so that a sender's retry never makes two tasks.
func (s *gwServer) postTasks(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, gwBatchLimit)
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeHTTPError(w, usageErr("empty request body: want a task spec as a JSON object, or one per line (JSONL) for a batch"))
		return
	}
	// Once begun, a write ends as it would have, the client gone or the
	// server stopping (which waits for it).
	ctx := context.WithoutCancel(r.Context())
	if !isJSONLines(r.Header.Get("Content-Type")) && oneSpecBody(body) {
		if len(body) > gwSpecLimit {
			s.fail(w, fmt.Errorf("request body too large: a spec may have %d bytes (a JSONL batch %d): %w",
				gwSpecLimit, gwBatchLimit, &http.MaxBytesError{Limit: gwSpecLimit}))
			return
		}
		sp, err := parseSpecLine(body, s.here)
		if err != nil {
			s.fail(w, &queue.Error{Kind: queue.KindOf(err), Msg: err.Error()})
			return
		}
		c, err := s.intake.create(ctx, sp)
		if err != nil {
			s.fail(w, oneSpecErr(err))
			return
		}
		status := http.StatusOK
		if c.New {
			status = http.StatusCreated
			w.Header().Set("Location", "/tasks/"+url.PathEscape(c.ID))
		}
		writeHTTPJSON(w, status, s.createdTask(ctx, c))
		return
	}
	specs, lineNo, err := readSpecLines(bytes.NewReader(body), s.here)
	if err != nil {
		s.fail(w, err)
		return
	}
	res, err := s.st.Create(ctx, specs, queue.CreateOptions{Enqueue: true})
	if err != nil {
		s.fail(w, batchErr(err, lineNo))
		return
	}
	// {id, state} each, as cq enqueue --batch -o json prints them: a
	// batch may hold a hundred thousand tasks, and reading each one back
	// in full would multiply a 16 MiB request into a far larger answer.
	status := http.StatusOK
	out := make([]map[string]string, len(res))
	for i, c := range res {
		if c.New {
			status = http.StatusCreated
		}
		out[i] = map[string]string{"id": c.ID, "state": c.State}
	}
	writeHTTPJSON(w, status, out)
}

// createdTask is a created task as cq show -o json prints it; should it
// be gone already (cq cleanup), what Create said of it: {id, state}.
func (s *gwServer) createdTask(ctx context.Context, c queue.Created) any {
	t, err := s.st.GetID(ctx, c.ID)
	if err != nil {
		return map[string]string{"id": c.ID, "state": c.State}
	}
	return t
}

// isJSONLines reports whether a Content-Type says JSON lines.
func isJSONLines(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch mt {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines":
		return true
	}
	return false
}

// oneSpecBody reports whether a POST /tasks body is one spec: one line,
// or one JSON value (an object written over several lines); anything
// else is read as JSONL.
func oneSpecBody(body []byte) bool {
	t := bytes.TrimSpace(body)
	if !bytes.ContainsAny(t, "\r\n") {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

// getTasks is GET /tasks: the tasks cq ls -o json prints, with its
// filters as parameters (state, repeatable or a comma-separated list;
// queue; key; limit, 50 by default, 0 for all).
func (s *gwServer) getTasks(w http.ResponseWriter, r *http.Request) {
	var f queue.ListFilter
	fs := gwFlagSet("ls")
	listFlags(fs, &f)
	if err := gwQueryFlags(fs, r.URL.Query()); err != nil {
		writeHTTPError(w, err)
		return
	}
	if err := checkListFilter(f); err != nil {
		writeHTTPError(w, err)
		return
	}
	ctx := r.Context()
	if f.Limit == 0 {
		// Every task: streamed as the store yields them, as cq ls
		// --limit 0 -o json does, so that memory stays flat.
		w.Header().Set("Content-Type", "application/json")
		bw := bufio.NewWriterSize(w, 64<<10)
		if err := streamTaskArray(ctx, s.st, f, bw); err != nil {
			sw, ok := w.(*gwStatusWriter)
			if !ok || sw.status == 0 {
				s.fail(w, err) // nothing sent yet
				return
			}
			// Half an array is sent: the connection is cut, so that
			// the client sees a failure rather than a short list.
			sw.err = err
			panic(http.ErrAbortHandler)
		}
		return
	}
	tasks, err := s.st.List(ctx, f)
	if err != nil {
		s.fail(w, err)
		return
	}
	if tasks == nil {
		tasks = []*queue.Task{}
	}
	writeHTTPJSON(w, http.StatusOK, tasks)
}

// getTask is GET /tasks/{id}: the task as cq show -o json prints it; the
// id may be a unique prefix.
func (s *gwServer) getTask(w http.ResponseWriter, r *http.Request) {
	ctx, ref := r.Context(), r.PathValue("id")
	t, err := s.st.Get(ctx, ref)
	if queue.IsNotFound(err) {
		// It may wait in the spool (cq enqueue --spool), which every
		// command drains as it opens the store, as cq show would.
		if n, derr := s.st.DrainSpool(ctx, s.home); derr == nil && n > 0 {
			t, err = s.st.Get(ctx, ref)
		}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeHTTPJSON(w, http.StatusOK, t)
}

// taskOp is POST /tasks/{id}/NAME for cq cancel, retry, hold and
// release: an optional body {"reason": "…"}; the answer {"id", "state"}
// as their -o json.
func (s *gwServer) taskOp(name string) http.HandlerFunc {
	op := taskOps[name]
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Reason string `json:"reason"`
		}
		if err := readJSONBody(w, r, &req, false); err != nil {
			s.fail(w, err)
			return
		}
		if err := checkReason(req.Reason); err != nil {
			writeHTTPError(w, err)
			return
		}
		id, state, err := op(s.st)(context.WithoutCancel(r.Context()), r.PathValue("id"), req.Reason)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeHTTPJSON(w, http.StatusOK, map[string]string{"id": id, "state": state})
	}
}

// postAnswer is POST /runs/{id}/answer, cq answer: the body
// {"approve": true|false, "reason": "…"}; the id a run's, or a task's
// (or a prefix of one); the answer the question as cq answer -o json
// prints it.
func (s *gwServer) postAnswer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Approve *bool  `json:"approve"`
		Reason  string `json:"reason"`
	}
	if err := readJSONBody(w, r, &req, true); err != nil {
		s.fail(w, err)
		return
	}
	if req.Approve == nil {
		writeHTTPError(w, usageErr(`give "approve": true or false`))
		return
	}
	if err := checkReason(req.Reason); err != nil {
		writeHTTPError(w, err)
		return
	}
	q, err := s.st.Answer(context.WithoutCancel(r.Context()), r.PathValue("id"), *req.Approve, req.Reason)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeHTTPJSON(w, http.StatusOK, q)
}

// readJSONBody decodes a request body, one JSON object of v's fields and
// no other, into v; an empty body leaves v as it is unless required.
func readJSONBody(w http.ResponseWriter, r *http.Request, v any, required bool) error {
	body, err := readBody(w, r, gwSpecLimit)
	if err != nil {
		return err
	}
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		if required {
			return usageErr("empty request body: want a JSON object")
		}
		return nil
	}
	if t[0] != '{' {
		return usageErr("bad request body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return usageErr("bad request body: %s", gwJSONText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return usageErr("bad request body: unexpected data after the JSON object")
	}
	return nil
}

// gwJSONText is a decoding error in a user's words.
func gwJSONText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		want := te.Type.String()
		switch te.Type.Kind() {
		case reflect.Bool:
			want = "true or false"
		case reflect.String:
			want = "a string"
		}
		return fmt.Sprintf("%q: want %s, not a %s", te.Field, want, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// gwFlagSet is a flag set that reads query parameters (gwQueryFlags): a
// name is taken with _ or -.
func gwFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, n string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(n, "_", "-"))
	})
	return fs
}

// gwQueryFlags sets the flags of fs, the command's own, from a request's
// query parameters named as they are: a parameter given twice is set
// twice (a list takes both), and an unknown one is bad usage, as an
// unknown flag is.
func gwQueryFlags(fs *pflag.FlagSet, q url.Values) error {
	for _, name := range sortedKeys(q) {
		if fs.Lookup(name) == nil {
			var names []string
			fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
			return usageErr("unknown parameter %q (want %s)", name, strings.Join(names, ", "))
		}
		for _, v := range q[name] {
			if err := fs.Set(name, v); err != nil {
				return usageErr("%s", flagErrorText(err))
			}
		}
	}
	return nil
}
