package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Spec is a task spec (docs/semantics.md, Tasks): CLI flags, or one JSON object per
// line for --batch and the spool. Unknown fields are an error.
type Spec struct {
	ID       string            `json:"id,omitempty"`
	Cmd      []string          `json:"cmd,omitempty"`
	Shell    string            `json:"shell,omitempty"`
	Intent   string            `json:"intent,omitempty"`
	Payload  json.RawMessage   `json:"payload,omitempty"`
	Queue    string            `json:"queue,omitempty"`
	Key      string            `json:"key,omitempty"`
	Unique   bool              `json:"unique,omitempty"`
	Priority string            `json:"priority,omitempty"`
	After    []string          `json:"after,omitempty"`
	Timeout  string            `json:"timeout,omitempty"`
	Retries  *int              `json:"retries,omitempty"`
	Delay    string            `json:"delay,omitempty"`
	At       string            `json:"at,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	Hold     bool              `json:"hold,omitempty"`
	// Probe marks a task whose failures are expected (seed 004's probe
	// lanes): never retried, left out of cq health's run figures.
	Probe bool `json:"probe,omitempty"`
}

var (
	// The patterns are compiled on first use, not at start-up: every cq
	// command pays for package initialisation, and most never parse a
	// duration.
	durationPattern = sync.OnceValue(func() *regexp.Regexp {
		// A Go duration with a d (days) unit as well.
		return regexp.MustCompile(`^[-+]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h|d))+)$`)
	})
	durationToken = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h|d)`)
	})
)

// MaxKeyLen bounds --key.
const MaxKeyLen = 256

// ValidID reports whether s may be a task id: [A-Za-z0-9][A-Za-z0-9._:@-]{0,127}
// ('@' joins a schedule's name and its slot's time, docs/schedules.md).
func ValidID(s string) bool { return validName(s, true) }

// validName reports whether s is [A-Za-z0-9][A-Za-z0-9._:-]{0,127}, '@'
// allowed after the first character when at.
func validName(s string, at bool) bool {
	if len(s) == 0 || len(s) > 128 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != ':' && c != '-' && (!at || c != '@') {
			return false
		}
	}
	return true
}

// ValidIntent reports whether s may name an intent handler:
// ^[A-Za-z0-9][A-Za-z0-9_.-]*$.
func ValidIntent(s string) bool {
	if len(s) == 0 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidEnvName reports whether s may name an environment variable.
func ValidEnvName(s string) bool { return validEnvKey(s) }

func validEnvKey(s string) bool {
	// ^[A-Za-z_][A-Za-z0-9_]*$
	if len(s) == 0 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// ValidQueueName reports whether s may name a queue (the id pattern).
func ValidQueueName(s string) bool { return validName(s, false) }

// ParseSpecJSON decodes one JSONL line strictly: one object, no unknown
// fields, nothing after it.
func ParseSpecJSON(line []byte) (Spec, error) {
	var s Spec
	if !utf8.Valid(line) {
		return s, invalidf("line is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return s, invalidf("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, invalidf("bad task spec: %s", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return s, invalidf("bad task spec: unexpected data after the JSON object")
	}
	// encoding/json matches field names without regard to case, so
	// "Cmd" would fill (or replace) cmd: names are checked as written.
	if err := checkSpecKeys(trimmed); err != nil {
		return s, err
	}
	return s, nil
}

// specFields are the names a JSONL spec may use, exactly as written.
var specFields = map[string]bool{
	"id": true, "cmd": true, "shell": true, "intent": true, "payload": true, "queue": true,
	"key": true, "unique": true, "priority": true, "after": true, "timeout": true,
	"retries": true, "delay": true, "at": true, "env": true, "cwd": true, "hold": true,
	"probe": true,
}

// checkSpecKeys walks the top-level names of obj, a JSON object the
// decoder has already accepted: each must be a spec field spelled exactly
// (case included), none may appear twice, and an id given as "" is
// refused rather than taken for no id (null still means none).
func checkSpecKeys(obj []byte) error {
	seen := make(map[string]bool, 8)
	i := skipSpace(obj, 1) // past '{'
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		if end-1 <= i {
			break
		}
		name := string(obj[i+1 : end-1])
		if strings.IndexByte(name, '\\') >= 0 {
			if err := json.Unmarshal(obj[i:end], &name); err != nil {
				return invalidf("bad task spec: %s", jsonErr(err))
			}
		}
		if !specFields[name] {
			return invalidf("bad task spec: unknown field %q", name)
		}
		if seen[name] {
			return invalidf("bad task spec: field %q given twice", name)
		}
		seen[name] = true
		i = skipSpace(obj, end)
		i = skipSpace(obj, i+1) // past ':'
		vend := skipValue(obj, i)
		if name == "id" && string(obj[i:vend]) == `""` {
			return invalidf("bad task spec: empty id")
		}
		i = skipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string starting at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the JSON value starting at i
// (valid JSON: the decoder has read it).
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	if b[i] == '"' {
		return skipString(b, i)
	}
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			i = skipString(b, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

func jsonErr(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "json: ")
	if strings.HasPrefix(msg, "unknown field") {
		return msg
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q: want %s", te.Field, te.Type.String())
	}
	return msg
}

// ParseDuration reads a Go duration with an extra d (days) unit, e.g. 30d,
// 1d12h, 90s.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, invalidf("empty duration")
	}
	bad := invalidf("invalid duration %q (want e.g. 90s, 1h30m, 30d)", s)
	if !durationPattern().MatchString(in) {
		return 0, bad
	}
	// Each whole number-and-unit token with unit d becomes hours; the
	// pattern above guarantees tokens never split a number.
	conv := durationToken().ReplaceAllStringFunc(in, func(tok string) string {
		if !strings.HasSuffix(tok, "d") {
			return tok
		}
		f, err := strconv.ParseFloat(strings.TrimSuffix(tok, "d"), 64)
		if err != nil {
			return tok
		}
		return strconv.FormatFloat(f*24, 'f', -1, 64) + "h"
	})
	d, err := time.ParseDuration(conv)
	if err != nil {
		return 0, bad
	}
	return d, nil
}

// ParseTime reads --at: RFC 3339, or "YYYY-MM-DD HH:MM[:SS]" in loc.
func ParseTime(s string, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	bad := invalidf("invalid time %q (want RFC 3339 or YYYY-MM-DD HH:MM[:SS], years 0001 to 9999)", s)
	inRange := func(t time.Time) (time.Time, error) {
		t = t.UTC()
		if t.Year() < 1 || t.Year() > 9999 {
			return time.Time{}, bad
		}
		return t, nil
	}
	// RFC 3339 allows a lower-case t and z; Go's layouts want them upper.
	u := strings.ToUpper(s)
	if t, err := time.Parse(time.RFC3339Nano, u); err == nil {
		return inRange(t)
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, u, loc); err == nil {
			return inRange(t)
		}
	}
	return time.Time{}, bad
}

// ParsePriority turns P0…P3 (any case) into 0…3.
func ParsePriority(s string) (int, error) {
	if len(s) == 2 && (s[0] == 'P' || s[0] == 'p') && s[1] >= '0' && s[1] <= '3' {
		return int(s[1] - '0'), nil
	}
	return 0, invalidf("invalid priority %q (want P0, P1, P2 or P3)", s)
}

// PriorityName turns 0…3 into P0…P3.
func PriorityName(p int) string { return "P" + strconv.Itoa(p) }

// Normalize validates s, fills in the defaults and canonical forms, and
// returns the spec to store. now is the creation time (a delay counts from
// it). The id is validated when set but not generated here.
func (s Spec) Normalize() (Spec, error) {
	n := s
	if n.ID != "" && !ValidID(n.ID) {
		return n, invalidf("invalid id %q (want [A-Za-z0-9][A-Za-z0-9._:@-]{0,127})", n.ID)
	}
	kinds := 0
	if n.Cmd != nil {
		kinds++
		if len(n.Cmd) == 0 || n.Cmd[0] == "" {
			return n, invalidf("empty command")
		}
	}
	if n.Shell != "" {
		kinds++
		if strings.TrimSpace(n.Shell) == "" {
			return n, invalidf("empty command")
		}
	}
	if n.Intent != "" {
		kinds++
		if !ValidIntent(n.Intent) {
			return n, invalidf("invalid intent name %q (want ^[A-Za-z0-9][A-Za-z0-9_.-]*$)", n.Intent)
		}
	}
	switch {
	case kinds == 0:
		return n, invalidf("empty command: give a command after --, --shell, or --intent")
	case kinds > 1:
		return n, invalidf("give only one of a command, --shell and --intent")
	}
	// A spec is stored as JSON, which holds text only: bytes that are not
	// UTF-8 would come back as U+FFFD, a different argument. They are
	// refused rather than changed.
	for i, a := range n.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return n, invalidf("command arguments may not contain NUL bytes")
		}
		if !utf8.ValidString(a) {
			return n, invalidf("command argument %d is not valid UTF-8 (cq stores commands as text)", i+1)
		}
	}
	if strings.IndexByte(n.Shell, 0) >= 0 {
		return n, invalidf("--shell may not contain NUL bytes")
	}
	if !utf8.ValidString(n.Shell) {
		return n, invalidf("--shell is not valid UTF-8 (cq stores commands as text)")
	}
	if len(n.Payload) > 0 {
		if n.Intent == "" {
			return n, invalidf("--payload needs --intent")
		}
		// JSON text is UTF-8; Go's decoder would let other bytes through.
		if !json.Valid(n.Payload) || !utf8.Valid(n.Payload) {
			return n, invalidf("payload is not valid JSON")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, n.Payload); err != nil {
			return n, invalidf("payload is not valid JSON")
		}
		n.Payload = buf.Bytes()
	}
	if n.Queue == "" {
		n.Queue = "default"
	}
	if !ValidQueueName(n.Queue) {
		return n, invalidf("invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", n.Queue)
	}
	if n.Key != "" {
		if len(n.Key) > MaxKeyLen || !utf8.ValidString(n.Key) || strings.ContainsAny(n.Key, "\x00\n\r\t") {
			return n, invalidf("invalid key %q (up to %d bytes of UTF-8, without tab, newline, carriage return or NUL)", n.Key, MaxKeyLen)
		}
	}
	if n.Unique && n.Key == "" {
		return n, invalidf("--unique needs --key")
	}
	if n.Priority == "" {
		n.Priority = "P2"
	}
	p, err := ParsePriority(n.Priority)
	if err != nil {
		return n, err
	}
	n.Priority = PriorityName(p)
	if len(n.After) > 0 {
		seen := map[string]bool{}
		var after []string
		for _, a := range n.After {
			a = strings.TrimSpace(a)
			if a == "" {
				return n, invalidf("--after: empty task id")
			}
			if !ValidID(a) {
				// No task can have this id: it names no task, as an
				// unknown id does, and show, cancel or wait of it say.
				return n, notFoundf("--after: no task %q (not a valid task id)", a)
			}
			if a == n.ID {
				return n, invalidf("--after: a task cannot depend on itself")
			}
			if !seen[a] {
				seen[a] = true
				after = append(after, a)
			}
		}
		n.After = after
	} else {
		n.After = nil
	}
	if n.Timeout != "" {
		d, err := ParseDuration(n.Timeout)
		if err != nil {
			return n, err
		}
		if d <= 0 {
			return n, invalidf("--timeout must be positive")
		}
		n.Timeout = d.String()
	}
	if n.Retries != nil && *n.Retries < 0 {
		return n, invalidf("--retries must be 0 or more")
	}
	if n.Probe && n.Retries != nil && *n.Retries > 0 {
		return n, invalidf("--probe cannot take --retries %d: a probe's failures are never retried", *n.Retries)
	}
	if n.Delay != "" && n.At != "" {
		return n, invalidf("give only one of --delay and --at")
	}
	if n.Delay != "" {
		d, err := ParseDuration(n.Delay)
		if err != nil {
			return n, err
		}
		if d < 0 {
			return n, invalidf("--delay must not be negative")
		}
		n.Delay = d.String()
	}
	if n.At != "" {
		t, err := ParseTime(n.At, time.Local)
		if err != nil {
			return n, err
		}
		n.At = FormatTime(t)
	}
	if len(n.Env) == 0 {
		n.Env = nil
	}
	for k, v := range n.Env {
		if !validEnvKey(k) {
			return n, invalidf("invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return n, invalidf("environment variable %s may not contain NUL bytes", k)
		}
		if !utf8.ValidString(v) {
			return n, invalidf("environment variable %s is not valid UTF-8 (cq stores it as text)", k)
		}
	}
	if n.Cwd != "" {
		if !utf8.ValidString(n.Cwd) {
			return n, invalidf("cwd is not valid UTF-8 (cq stores it as text)")
		}
		if !filepath.IsAbs(n.Cwd) {
			return n, invalidf("cwd %q is not an absolute path", n.Cwd)
		}
		n.Cwd = filepath.Clean(n.Cwd)
	}
	return n, nil
}

// Canonical is the stored form of a normalised spec, without its id: two
// specs are "the same" for --id idempotency when these bytes are equal.
func (s Spec) Canonical() string {
	c := s
	c.ID = ""
	if c.After != nil {
		c.After = append([]string(nil), c.After...)
		sort.Strings(c.After)
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// SameSpec reports whether stored, a Canonical form read back from the
// store, and canon describe the same task for --id idempotency: the same
// bytes, or the same but for how the payload's JSON is spelled (key
// order, escapes, 1 against 1.0). The payload itself is kept as given.
func SameSpec(stored, canon string) bool {
	if stored == canon {
		return true
	}
	var a, b Spec
	if json.Unmarshal([]byte(stored), &a) != nil || json.Unmarshal([]byte(canon), &b) != nil {
		return false
	}
	if len(a.Payload) == 0 || len(b.Payload) == 0 {
		return false
	}
	pa, pb := a.Payload, b.Payload
	a.Payload, b.Payload = nil, nil
	if a.Canonical() != b.Canonical() {
		return false
	}
	va, errA := decodeJSONValue(pa)
	vb, errB := decodeJSONValue(pb)
	return errA == nil && errB == nil && sameJSONValue(va, vb)
}

func decodeJSONValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// sameJSONValue compares two decoded JSON values: objects by their
// members whatever their order, numbers by value.
func sameJSONValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameJSONValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSONValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		if !modestNumber(string(x)) || !modestNumber(string(y)) {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	default: // string, bool, nil
		return a == b
	}
}

// modestNumber reports whether a JSON number is small enough to compare
// exactly at little cost: big.Rat would build 10^e for an exponent e, so
// 1e999999999 would take minutes.
func modestNumber(s string) bool {
	mant, exp, found := strings.Cut(strings.ToLower(s), "e")
	if len(mant) > 400 {
		return false
	}
	if !found {
		return true
	}
	e, err := strconv.Atoi(strings.TrimPrefix(exp, "+"))
	return err == nil && e >= -400 && e <= 400
}

// NotBefore is the time a scheduled spec may start, or zero.
func (s Spec) NotBefore(created time.Time) time.Time {
	if s.At != "" {
		t, _ := time.Parse(time.RFC3339Nano, s.At)
		return t
	}
	if s.Delay != "" {
		d, _ := ParseDuration(s.Delay)
		if d > 0 {
			return created.Add(d)
		}
	}
	return time.Time{}
}

// TimeFormat is how cq stores and prints times: RFC 3339 UTC, fixed width,
// so that stored times compare correctly as text.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeFormat. A transaction writes its time
// into every row and event it touches, so the last time rendered is
// kept and given again for the same instant.
func FormatTime(t time.Time) string {
	if m := lastFormatted.Load(); m != nil && m.t.Equal(t) {
		return m.s
	}
	s := t.UTC().Format(TimeFormat)
	lastFormatted.Store(&formatted{t: t, s: s})
	return s
}

// formatted is a time and its rendering by FormatTime.
type formatted struct {
	t time.Time
	s string
}

var lastFormatted atomic.Pointer[formatted]

// ParseStoredTime reads a time written by FormatTime.
func ParseStoredTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}
