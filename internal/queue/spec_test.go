package queue_test

import (
	"errors"
	"strings"
	"testing"

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
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &qe) || qe.Code != queue.CodeInvalid {
			t.Errorf("%s: Normalize = %v; want an invalid-spec error saying %q", name, err, c.want)
		}
	}
	good := queue.Spec{Cmd: []string{"echo", "café 日本"}, Env: map[string]string{"V": "ü"}, Cwd: "/tmp/é"}
	n, err := good.Normalize()
	if err != nil || n.Cmd[1] != "café 日本" || n.Env["V"] != "ü" || n.Cwd != "/tmp/é" {
		t.Errorf("valid UTF-8: %+v, %v; want it kept as given", n, err)
	}
}
