package queue_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// TestNormalizeRefusesBytesJSONCannotHold: a spec is stored as JSON, so an
// argument, --shell, an env value or cwd that is not UTF-8 is refused
// (it would come back with U+FFFD in place of its bytes), and valid
// UTF-8 passes unchanged.
func TestNormalizeRefusesBytesJSONCannotHold(t *testing.T) {
	t.Parallel()
	bad := "caf\xe9"
	for name, c := range map[string]struct {
		spec queue.Spec
		want string
	}{
		"argument":  {queue.Spec{Cmd: []string{"echo", bad}}, "command argument 2 is not valid UTF-8"},
		"program":   {queue.Spec{Cmd: []string{"/tmp/" + bad}}, "command argument 1 is not valid UTF-8"},
		"shell":     {queue.Spec{Shell: "echo " + bad}, "--shell is not valid UTF-8"},
		"env value": {queue.Spec{Cmd: []string{"true"}, Env: map[string]string{"V": bad}}, "environment variable V is not valid UTF-8"},
		"cwd":       {queue.Spec{Cmd: []string{"true"}, Cwd: "/tmp/" + bad}, "cwd is not valid UTF-8"},
		"payload":   {queue.Spec{Intent: "x", Payload: []byte(`"` + bad + `"`)}, "payload is not valid JSON"},
	} {
		_, err := c.spec.Normalize()
		var qe *queue.Error
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &qe) || qe.Kind != queue.Invalid {
			t.Errorf("%s: Normalize = %v; want an invalid-spec error saying %q", name, err, c.want)
		}
	}
	good := queue.Spec{Cmd: []string{"echo", "café 日本"}, Env: map[string]string{"V": "ü"}, Cwd: "/tmp/é"}
	n, err := good.Normalize()
	if err != nil || n.Cmd[1] != "café 日本" || n.Env["V"] != "ü" || n.Cwd != "/tmp/é" {
		t.Errorf("valid UTF-8: %+v, %v; want it kept as given", n, err)
	}
}

// TestSameSpecComparesPayloadsAsJSON: --id idempotency takes two payloads
// that differ only in spelling (key order, escapes, number form) for the
// same, and anything else for a conflict; a huge exponent is compared as
// text, never expanded.
func TestSameSpecComparesPayloadsAsJSON(t *testing.T) {
	canon := func(payload string) string {
		t.Helper()
		sp, err := queue.Spec{ID: "p", Intent: "send", Payload: json.RawMessage(payload), Cwd: "/"}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		return sp.Canonical()
	}
	stored := canon(`{"to":"a","n":1,"l":[1,2]}`)
	for _, same := range []string{
		`{"to":"a","n":1,"l":[1,2]}`,
		`{"l":[1,2],"n":1,"to":"a"}`,
		`{ "to" : "\u0061", "n": 1.0, "l": [1e0, 20e-1] }`,
	} {
		if !queue.SameSpec(stored, canon(same)) {
			t.Errorf("%s: not the same spec as %s", same, stored)
		}
	}
	for _, other := range []string{
		`{"to":"a","n":2,"l":[1,2]}`,
		`{"to":"a","n":"1","l":[1,2]}`,
		`{"to":"a","n":1,"l":[2,1]}`,
		`{"to":"a","n":1,"l":[1,2],"x":null}`,
		`{"to":"a","n":1}`,
		`[1,2]`,
	} {
		if queue.SameSpec(stored, canon(other)) {
			t.Errorf("%s: the same spec as %s", other, stored)
		}
	}
	// The payload's spelling is forgiven, nothing else.
	sp, _ := queue.Spec{ID: "p", Intent: "other", Payload: json.RawMessage(`{"l":[1,2],"n":1,"to":"a"}`), Cwd: "/"}.Normalize()
	if queue.SameSpec(stored, sp.Canonical()) {
		t.Error("another intent with an equal payload is the same spec")
	}
	done := make(chan bool)
	go func() { done <- queue.SameSpec(canon(`{"n":1e999999999}`), canon(`{"n":1e999999998}`)) }()
	select {
	case same := <-done:
		if same {
			t.Error("1e999999999 and 1e999999998 are the same")
		}
	case <-time.After(10 * time.Second):
		t.Error("comparing numbers with huge exponents took over 10s")
	}
}

// JSONL field names are taken as written: encoding/json alone would let
// "Cmd" fill or replace cmd.
func TestParseSpecJSONFieldNames(t *testing.T) {
	for _, line := range []string{
		`{"id":"x","cmd":["true"],"Cmd":["false"]}`,
		`{"ID":"y","cmd":["true"]}`,
		`{"cmd":["true"],"Priority":"P0"}`,
		`{"cmd":["true"],"cmd":["false"]}`,
		`{"id":"","cmd":["true"]}`,
		`{ "id" : "" , "cmd":["true"]}`,
	} {
		_, err := queue.ParseSpecJSON([]byte(line))
		if qe := (*queue.Error)(nil); !errors.As(err, &qe) || qe.Kind != queue.Invalid {
			t.Errorf("ParseSpecJSON(%s) = %v, want an invalid-spec error", line, err)
		}
	}
	for _, tc := range []struct{ line, id, cmd string }{
		{`{"id":null,"cmd":["true"]}`, "", "true"},
		{`{"\u0069d":"esc","cmd":["true"]}`, "esc", "true"},
		{`{"env":{"Cmd":"x","cmd":"y"},"payload":{"Cmd":[1,{"id":""}]},"intent":"i","id":"n"}`, "n", ""},
		{"{\"cmd\" :\t[\"a,b\", \"}\"] , \"id\":\"s\" }", "s", "a,b"},
	} {
		sp, err := queue.ParseSpecJSON([]byte(tc.line))
		if err != nil {
			t.Errorf("ParseSpecJSON(%s): %v", tc.line, err)
			continue
		}
		if sp.ID != tc.id || (tc.cmd != "" && (len(sp.Cmd) == 0 || sp.Cmd[0] != tc.cmd)) {
			t.Errorf("ParseSpecJSON(%s) = id %q cmd %q, want id %q cmd %q", tc.line, sp.ID, sp.Cmd, tc.id, tc.cmd)
		}
	}
}
