package queue_test

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gofrs/flock"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/spool"
	"github.com/cq-dev/cq/internal/store/sqlite"
)

// rejectedEntry is one line of queue.rejected.jsonl (docs/operations.md, The spool).
// Line holds the raw line's exact bytes, from line or from line_base64.
type rejectedEntry struct {
	At         string  `json:"at"`
	Error      string  `json:"error"`
	Line       string  `json:"line"`
	LineBase64 *string `json:"line_base64"`
}

func (b *bundle) writeSpool(t *testing.T, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(b.home, spool.FileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) spoolBytes(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.home, spool.FileName))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return data
}

// rejected reads queue.rejected.jsonl strictly: every line must be exactly
// the documented shape, with nothing more and nothing missing.
func (b *bundle) rejected(t *testing.T) []rejectedEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.home, spool.RejectedName))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("rejected file does not end with a newline: %q", data)
	}
	var out []rejectedEntry
	for _, ln := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(ln, &fields); err != nil {
			t.Fatalf("rejected line %q is not a JSON object: %v", ln, err)
		}
		_, hasLine := fields["line"]
		_, hasB64 := fields["line_base64"]
		if len(fields) != 3 || hasLine == hasB64 {
			t.Fatalf("rejected line %s: want exactly at, error, and line or line_base64", ln)
		}
		var e rejectedEntry
		dec := json.NewDecoder(bytes.NewReader(ln))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("rejected line %s: %v", ln, err)
		}
		if _, err := time.Parse(time.RFC3339, e.At); err != nil || !strings.HasSuffix(e.At, "Z") {
			t.Fatalf("rejected line %s: at %q is not RFC 3339 UTC", ln, e.At)
		}
		if e.Error == "" {
			t.Fatalf("rejected line %s: empty error", ln)
		}
		if e.LineBase64 != nil {
			raw, err := base64.StdEncoding.DecodeString(*e.LineBase64)
			if err != nil {
				t.Fatalf("rejected line %s: line_base64: %v", ln, err)
			}
			// line_base64 is for what a JSON string cannot hold.
			if utf8.Valid(raw) {
				t.Fatalf("rejected line %s: line_base64 for a valid UTF-8 line", ln)
			}
			e.Line = string(raw)
		}
		out = append(out, e)
	}
	return out
}

func (b *bundle) drain(t *testing.T) int {
	t.Helper()
	n, err := b.st.DrainSpool(b.ctx, b.home)
	if err != nil {
		t.Fatalf("DrainSpool: %v", err)
	}
	if data := b.spoolBytes(t); len(data) != 0 {
		t.Fatalf("spool not empty after a drain: %q", data)
	}
	return n
}

func spoolLine(t *testing.T, sp queue.Spec) string {
	t.Helper()
	line, err := json.Marshal(norm(t, sp))
	if err != nil {
		t.Fatal(err)
	}
	return string(line)
}

func TestDrainSpoolStoresAndIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l1 := spoolLine(t, queue.Spec{ID: "s1"})
	l2 := spoolLine(t, queue.Spec{ID: "s2", After: []string{"s1"}}) // an earlier line of the same spool
	l3 := spoolLine(t, queue.Spec{ID: "s3", Hold: true})
	b.writeSpool(t, l1+"\n\n  \n"+l2+"\n"+l3+"\n")
	if n := b.drain(t); n != 3 {
		t.Fatalf("drained %d lines, want 3 (blank lines are not lines)", n)
	}
	b.wantState(t, "s1", queue.TaskTodo, "")
	b.wantState(t, "s2", queue.TaskBlocked, queue.BlockedDependency)
	b.wantState(t, "s3", queue.TaskBlocked, queue.BlockedHold)
	if r := b.rejected(t); len(r) != 0 {
		t.Fatalf("rejected %+v, want nothing", r)
	}

	// A crash after the commit but before the truncation leaves the same
	// lines in the spool: draining them again duplicates nothing.
	before := b.dump(t)
	b.writeSpool(t, l1+"\n"+l2+"\n"+l3+"\n")
	b.drain(t)
	if after := b.dump(t); after != before {
		t.Fatalf("re-draining stored lines changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if r := b.rejected(t); len(r) != 0 {
		t.Fatalf("re-draining stored lines rejected %+v", r)
	}

	// Nothing to drain is not an error, and touches nothing.
	if n := b.drain(t); n != 0 {
		t.Fatalf("an empty spool drained %d lines", n)
	}
}

func TestDrainSpoolRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enq(t, queue.Spec{ID: "taken"})
	b.enq(t, queue.Spec{Key: "uk"})
	good := spoolLine(t, queue.Spec{ID: "good"})
	bad := map[string]string{
		"no id":              spoolLine(t, queue.Spec{}),
		"unknown field":      `{"id":"u1","cmd":["true"],"cwd":"/","colour":"red"}`,
		"malformed":          `{"id":"m1","cmd":["true"]`,
		"not an object":      `["id","x"]`,
		"invalid spec":       `{"id":"v1","cmd":["true"],"priority":"P9"}`,
		"id re-used":         spoolLine(t, queue.Spec{ID: "taken", Cmd: []string{"false"}}),
		"unique key held":    spoolLine(t, queue.Spec{ID: "uq", Key: "uk", Unique: true}),
		"after naming none":  spoolLine(t, queue.Spec{ID: "orphan", After: []string{"nosuchtask"}}),
		"invalid id":         `{"id":"-bad","cmd":["true"],"cwd":"/"}`,
		"invalid UTF-8":      "{\"id\":\"w1\",\"cmd\":[\"\xff\"],\"cwd\":\"/\"}",
		"trailing data":      `{"id":"t1","cmd":["true"],"cwd":"/"} {}`,
		"conflicts in spool": spoolLine(t, queue.Spec{ID: "good", Cmd: []string{"other"}}),
	}
	var lines []string
	lines = append(lines, good)
	for _, l := range bad {
		lines = append(lines, l)
	}
	b.writeSpool(t, strings.Join(lines, "\n")+"\n")
	tasksBefore := b.taskCount(t)
	if n := b.drain(t); n != len(lines) {
		t.Fatalf("drained %d lines, want %d", n, len(lines))
	}
	if got := b.taskCount(t); got != tasksBefore+1 {
		t.Fatalf("%d tasks stored, want only the good line's", got-tasksBefore)
	}
	b.wantState(t, "good", queue.TaskTodo, "")

	rej := b.rejected(t)
	got := map[string]rejectedEntry{}
	for _, r := range rej {
		got[r.Line] = r
	}
	for name, l := range bad {
		// Every line comes back byte for byte; the one that is not valid
		// UTF-8 through line_base64.
		if _, ok := got[l]; !ok {
			t.Errorf("%s: line %q not in the rejected file (have %d entries)", name, l, len(rej))
		}
	}
	if len(rej) != len(bad) {
		t.Fatalf("%d rejected entries, want %d: %+v", len(rej), len(bad), rej)
	}
	if r := got[bad["after naming none"]]; !strings.Contains(r.Error, "nosuchtask") {
		t.Errorf("after-naming-none error %q does not name the missing task", r.Error)
	}
	if r := got[bad["unknown field"]]; !strings.Contains(r.Error, "colour") {
		t.Errorf("unknown-field error %q does not name the field", r.Error)
	}
	if r := got[bad["no id"]]; r.At != queue.FormatTime(b.clock.Now()) {
		t.Errorf("rejected at %q, want the store clock's %q", r.At, queue.FormatTime(b.clock.Now()))
	}
}

func TestDrainSpoolTornLastLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := spoolLine(t, queue.Spec{ID: "whole"})
	torn := `{"id":"torn","cmd":["tr`
	b.writeSpool(t, good+"\n"+torn)
	if n := b.drain(t); n != 1 {
		t.Fatalf("drained %d lines, want 1 (the torn line is not handed over)", n)
	}
	b.wantState(t, "whole", queue.TaskTodo, "")
	if _, err := b.st.Resolve(b.ctx, "torn"); !queue.IsNotFound(err) {
		t.Fatalf("the torn line was stored: %v", err)
	}
	rej := b.rejected(t)
	if len(rej) != 1 || rej[0].Line != torn {
		t.Fatalf("rejected %+v, want exactly the torn line %q", rej, torn)
	}

	t.Run("a torn line that is valid JSON is still a crash leftover", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// An appender writes the line and its newline in one write; a
		// complete-looking line without its newline was still cut short.
		line := spoolLine(t, queue.Spec{ID: "cut"})
		b.writeSpool(t, line)
		b.drain(t)
		if rej := b.rejected(t); len(rej) != 1 || rej[0].Line != line {
			t.Fatalf("rejected %+v, want the unterminated line", rej)
		}
	})
}

func TestDrainSpoolTruncatesOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A trigger makes the store fail in the middle of the drain's
	// transaction, after earlier lines were written in it.
	if _, err := sqlite.DBOf(b.st.Backend()).SQL.ExecContext(b.ctx, `CREATE TRIGGER fail_boom BEFORE INSERT ON tasks WHEN NEW.id = 'boom'
		BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	data := spoolLine(t, queue.Spec{ID: "before"}) + "\n" +
		spoolLine(t, queue.Spec{ID: "boom"}) + "\n" +
		`{"no":"id"}` + "\n" +
		spoolLine(t, queue.Spec{ID: "after"}) + "\n"
	b.writeSpool(t, data)
	storeBefore := b.dump(t)
	if _, err := b.st.DrainSpool(b.ctx, b.home); err == nil {
		t.Fatal("DrainSpool succeeded although the store failed")
	}
	if got := b.spoolBytes(t); string(got) != data {
		t.Fatalf("a failed drain changed the spool:\n got %q\nwant %q", got, data)
	}
	if after := b.dump(t); after != storeBefore {
		t.Fatalf("a failed drain left writes in the store")
	}
	if r := b.rejected(t); len(r) != 0 {
		t.Fatalf("a failed drain wrote rejects %+v before anything was committed", r)
	}

	if _, err := sqlite.DBOf(b.st.Backend()).SQL.ExecContext(b.ctx, `DROP TRIGGER fail_boom`); err != nil {
		t.Fatal(err)
	}
	b.drain(t)
	for _, id := range []string{"before", "boom", "after"} {
		b.wantState(t, id, queue.TaskTodo, "")
	}
	if r := b.rejected(t); len(r) != 1 || r[0].Line != `{"no":"id"}` {
		t.Fatalf("rejected %+v, want the line without an id once", r)
	}
}

func TestDrainSpoolHugeLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Far beyond any default line buffer (bufio's 64 KiB, a pipe's 4 KiB).
	huge := spoolLine(t, queue.Spec{ID: "huge", Cmd: []string{"echo", strings.Repeat("x", 4<<20)}})
	junk := strings.Repeat("\xff{junk", 1<<18)
	tornHuge := huge[:len(huge)-2]
	b.writeSpool(t, huge+"\n"+junk+"\n"+tornHuge)
	if n := b.drain(t); n != 2 {
		t.Fatalf("drained %d lines, want 2", n)
	}
	if got := b.get(t, "huge").Cmd; len(got) != 2 || len(got[1]) != 4<<20 {
		t.Fatalf("the huge line's command came back with %d arguments", len(got))
	}
	rej := b.rejected(t)
	if len(rej) != 2 {
		t.Fatalf("%d rejected entries, want the junk line and the torn one", len(rej))
	}
	lines := map[string]bool{rej[0].Line: true, rej[1].Line: true}
	if !lines[tornHuge] || !lines[junk] {
		t.Fatalf("rejected file does not hold the junk and torn lines intact")
	}
}

// TestDrainSpoolWithinGivesWayToAWriter: a command that only reads drains
// the spool unless another process holds the spool lock or the store's
// write lock past the wait; then it drains nothing, loses nothing, and
// returns at once instead of queueing behind that writer.
func TestDrainSpoolWithinGivesWayToAWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	line := spoolLine(t, queue.Spec{ID: "sp1"})
	b.writeSpool(t, line+"\n")
	const wait = 100 * time.Millisecond
	// Far below the 30 s busy timeout: a drain that waits for it fails.
	const within = 10 * time.Second

	// Another process's write transaction (its own connection and pool).
	other, err := sql.Open("sqlite3", "file:"+filepath.Join(b.home, "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(b.ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, ok, err := b.st.DrainSpoolWithin(b.ctx, b.home, wait)
	if took := time.Since(start); err != nil || ok || n != 0 || took > within {
		t.Fatalf("beside a writer: drained %d, ok %v, err %v in %v; want 0, false, nil at once", n, ok, err, took)
	}
	if got := string(b.spoolBytes(t)); got != line+"\n" {
		t.Fatalf("the spool changed while the store was busy: %q", got)
	}
	if _, err := conn.ExecContext(b.ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	// The spool lock held by another process (an appender or a drainer).
	l := flock.New(filepath.Join(b.home, spool.LockName))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	n, ok, err = b.st.DrainSpoolWithin(b.ctx, b.home, wait)
	if took := time.Since(start); err != nil || ok || n != 0 || took > within {
		t.Fatalf("beside the spool lock: drained %d, ok %v, err %v in %v; want 0, false, nil at once", n, ok, err, took)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}

	// Nobody in the way: it drains, and later writes wait as usual.
	n, ok, err = b.st.DrainSpoolWithin(b.ctx, b.home, wait)
	if err != nil || !ok || n != 1 {
		t.Fatalf("alone: drained %d, ok %v, err %v; want 1, true, nil", n, ok, err)
	}
	b.wantState(t, "sp1", queue.TaskTodo, "")
	if data := b.spoolBytes(t); len(data) != 0 {
		t.Fatalf("spool not empty after the drain: %q", data)
	}
}
