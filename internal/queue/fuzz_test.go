package queue_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/spool"
	"github.com/cq-dev/cq/internal/store/storetest"
)

// Seeds live in testdata/fuzz/<FuzzName>/; the f.Add calls below add the
// few that are easier to build in code.

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	var qe *queue.Error
	if !errors.As(err, &qe) || qe.Kind != queue.Invalid {
		t.Fatalf("%s: error %v (%T), want a *queue.Error with Invalid", what, err, err)
	}
}

var specField = map[string]bool{"id": true, "cmd": true, "shell": true, "intent": true, "payload": true,
	"queue": true, "key": true, "unique": true, "priority": true, "after": true, "timeout": true,
	"retries": true, "delay": true, "at": true, "env": true, "cwd": true, "hold": true}

// FuzzParseSpecJSON: parsing and normalising a JSONL spec never panics,
// refuses only with Invalid, and whatever it accepts survives a round
// trip through its own JSON form unchanged (the spool relies on this: cq
// enqueue --spool writes the normalised spec, the drain reads it back).
func FuzzParseSpecJSON(f *testing.F) {
	f.Add([]byte(`{"id":"a","cmd":["echo","hi"],"cwd":"/tmp"}`))
	f.Add([]byte(`{"intent":"mail.send","payload":{"to":["x@y"],"n":1.50}}`))
	f.Add([]byte(`{"id":"c","cmd":["true"],"Cmd":["false"],"env":{"Cmd":"1"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		sp, err := queue.ParseSpecJSON(line)
		if err != nil {
			wantInvalid(t, err, "ParseSpecJSON")
			return
		}
		// What it accepts names only spec fields, spelled exactly.
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(line, &fields); err != nil {
			t.Fatalf("ParseSpecJSON accepted %q, which is no JSON object: %v", line, err)
		}
		for name := range fields {
			if !specField[name] {
				t.Fatalf("ParseSpecJSON accepted the field %q in %q", name, line)
			}
		}
		n, err := sp.Normalize()
		if err != nil {
			wantInvalid(t, err, "Normalize")
			return
		}
		again, err := n.Normalize()
		if err != nil {
			t.Fatalf("Normalize is not idempotent: the normalised spec %+v is refused: %v", n, err)
		}
		if again.Canonical() != n.Canonical() {
			t.Fatalf("Normalize is not idempotent:\n first %s\nsecond %s", n.Canonical(), again.Canonical())
		}
		out, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("json.Marshal(%+v): %v", n, err)
		}
		if bytes.IndexByte(out, '\n') >= 0 {
			t.Fatalf("the JSON form of a spec spans lines: %q", out)
		}
		back, err := queue.ParseSpecJSON(out)
		if err != nil {
			t.Fatalf("ParseSpecJSON refuses its own output %s: %v", out, err)
		}
		nb, err := back.Normalize()
		if err != nil {
			t.Fatalf("Normalize refuses the round-tripped spec %s: %v", out, err)
		}
		if nb.Canonical() != n.Canonical() || nb.ID != n.ID {
			t.Fatalf("round trip changed the spec:\n before %s (id %q)\n  after %s (id %q)", n.Canonical(), n.ID, nb.Canonical(), nb.ID)
		}
	})
}

// FuzzParseDuration checks ParseDuration against the documented grammar (docs/semantics.md):
// "Go durations plus a d suffix for days", written out in refDuration
// below as time.ParseDuration's own grammar with one more unit.
func FuzzParseDuration(f *testing.F) {
	f.Add("1d12h")
	f.Add(" 30d ")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := queue.ParseDuration(s)
		if err != nil {
			wantInvalid(t, err, "ParseDuration("+s+")")
		}
		if std, serr := time.ParseDuration(s); serr == nil && (err != nil || got != std) {
			t.Fatalf("ParseDuration(%q) = %v, %v; a Go duration must mean what time.ParseDuration says: %v", s, got, err, std)
		}
		want, ok, edge := refDuration(s)
		if !edge && ok != (err == nil) {
			if ok {
				t.Fatalf("ParseDuration(%q) refused a duration of the documented grammar (%s ns): %v", s, want.FloatString(0), err)
			}
			t.Fatalf("ParseDuration(%q) = %v; durations are only Go durations plus a d suffix, and this is neither", s, got)
		}
		if err != nil {
			return
		}
		if ok {
			diff := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(got)), want)
			tol := new(big.Rat).Abs(want)
			tol.Mul(tol, big.NewRat(1, 1e12)).Add(tol, big.NewRat(2, 1))
			if diff.Abs(diff).Cmp(tol) > 0 {
				t.Fatalf("ParseDuration(%q) = %d ns, want %s ns", s, int64(got), want.FloatString(3))
			}
		}
		if back, err := queue.ParseDuration(got.String()); err != nil || back != got {
			t.Fatalf("ParseDuration(%q) = %v, whose String() reads back as %v, %v", s, got, back, err)
		}
	})
}

// refDuration parses s by time.ParseDuration's grammar (an optional sign,
// then "0" or a sequence of decimal numbers each with a unit) with d = 24h
// added, exactly, in nanoseconds. edge reports a value so close to the
// int64 limit that float rounding may decide either way.
func refDuration(s string) (val *big.Rat, ok, edge bool) {
	units := map[string]int64{
		"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6,
		"s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9,
	}
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return new(big.Rat), true, false
	}
	if s == "" {
		return nil, false, false
	}
	total := new(big.Rat)
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	for s != "" {
		i := 0
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		intPart := s[:i]
		s = s[i:]
		frac := ""
		if s != "" && s[0] == '.' {
			s = s[1:]
			j := 0
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			frac, s = s[:j], s[j:]
		}
		if intPart == "" && frac == "" {
			return nil, false, false
		}
		j := 0
		for j < len(s) && s[j] != '.' && !isDigit(s[j]) {
			j++
		}
		unit, known := units[s[:j]]
		if j == 0 || !known {
			return nil, false, false
		}
		s = s[j:]
		num, okNum := new(big.Rat).SetString("0" + intPart + "." + frac + "0")
		if !okNum {
			return nil, false, false
		}
		total.Add(total, num.Mul(num, new(big.Rat).SetInt64(unit)))
	}
	if neg {
		total.Neg(total)
	}
	limit := new(big.Rat).SetInt64(math.MaxInt64)
	abs := new(big.Rat).Abs(total)
	lo := new(big.Rat).Mul(limit, big.NewRat(999999, 1000000))
	hi := new(big.Rat).Mul(limit, big.NewRat(1000001, 1000000))
	edge = abs.Cmp(lo) >= 0 && abs.Cmp(hi) <= 0
	return total, abs.Cmp(limit) <= 0, edge
}

// FuzzSpoolDrain writes arbitrary bytes as a spool and drains it: the drain
// never fails or panics, leaves the spool empty, and every non-blank line
// is either stored (a task with its id and its spec exists) or recorded in
// queue.rejected.jsonl (never silently dropped).
func FuzzSpoolDrain(f *testing.F) {
	// A long line, kept moderate: the fuzzer minimises every new
	// interesting input, which takes minutes on one of megabytes;
	// TestDrainSpoolHugeLines covers those.
	long := `{"id":"long","cmd":["echo","` + strings.Repeat("x", 5000) + `"],"cwd":"/"}`
	f.Add([]byte(long + "\n" + long[:1000]))
	f.Add([]byte(strings.Repeat(`{"id":"r","cmd":["true"]}`+"\n", 50)))
	// One database per fuzzing process, emptied before each input: opening
	// and migrating a new one costs more than the drain, and the fuzzer
	// runs (and minimises) thousands of inputs.
	ctx := context.Background()
	d := storetest.OpenSQLite(f, "")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, table := range []string{"task_deps", "runs", "tasks", "events", "queues"} {
			if _, err := d.SQL.ExecContext(ctx, `DELETE FROM `+table); err != nil {
				t.Fatal(err)
			}
		}
		home := t.TempDir()
		st := queue.New(d.Store())
		st.Now = func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }
		if err := os.WriteFile(filepath.Join(home, spool.FileName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DrainSpool(ctx, home); err != nil {
			t.Fatalf("DrainSpool: %v", err)
		}
		if rest, err := os.ReadFile(filepath.Join(home, spool.FileName)); err != nil || len(rest) != 0 {
			t.Fatalf("spool after the drain: %q, %v; want it empty", rest, err)
		}

		// The rejected file, as a multiset of lines.
		rejected := map[string]int{}
		if raw, err := os.ReadFile(filepath.Join(home, spool.RejectedName)); err == nil {
			for _, ln := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
				var e struct {
					At         string  `json:"at"`
					Error      string  `json:"error"`
					Line       *string `json:"line"`
					LineBase64 *string `json:"line_base64"`
				}
				if err := json.Unmarshal(ln, &e); err != nil || (e.Line == nil) == (e.LineBase64 == nil) || e.Error == "" || e.At == "" {
					t.Fatalf("rejected file line %q is not {at, error, line or line_base64}: %v", ln, err)
				}
				if e.LineBase64 != nil {
					raw, err := base64.StdEncoding.DecodeString(*e.LineBase64)
					if err != nil {
						t.Fatalf("rejected file line %q: line_base64: %v", ln, err)
					}
					e.Line = new(string(raw))
				}
				rejected[*e.Line]++
			}
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}

		for _, ln := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(ln)) == 0 {
				continue
			}
			// Every rejected line comes back byte for byte (a line that
			// is not valid UTF-8 through line_base64).
			key := string(ln)
			if rejected[key] > 0 {
				rejected[key]--
				continue
			}
			sp, err := queue.SpoolLine(ln)
			if err != nil {
				t.Fatalf("line %q is invalid (%v) yet was not rejected", ln, err)
			}
			var spec string
			err = d.SQL.QueryRowContext(ctx, `SELECT spec FROM tasks WHERE id = ?`, sp.ID).Scan(&spec)
			if err != nil {
				t.Fatalf("line %q was neither stored nor rejected: task %s: %v", ln, sp.ID, err)
			}
			if spec != sp.Canonical() {
				t.Fatalf("line %q was not rejected, but task %s holds another spec:\n%s\n%s", ln, sp.ID, spec, sp.Canonical())
			}
		}
		for line, n := range rejected {
			// Only an unterminated last line of blanks may be rejected
			// without being a line counted above.
			if n > 0 && strings.TrimSpace(line) != "" {
				t.Fatalf("rejected %d× a line that was not in the spool: %q", n, line)
			}
		}
	})
}
