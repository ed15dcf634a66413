package scripts

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSystemdUnit runs cq-serve.service's command as systemd would:
// the token as a credential (mode 0400 in a folder of its own, %d), the
// unit's WorkingDirectory; writes need the token, a task posted without a
// cwd runs in that folder, and SIGTERM stops it with exit 0 well within
// TimeoutStopSec.
func TestServeSystemdUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("cq-serve.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = v
		}
	}
	if unit["KillSignal"] != "SIGTERM" {
		t.Fatalf("KillSignal = %q, want SIGTERM", unit["KillSignal"])
	}
	stop, err := time.ParseDuration(unit["TimeoutStopSec"] + "s")
	if err != nil || stop <= 5*time.Second+3*time.Second {
		t.Fatalf("TimeoutStopSec %v must exceed cq serve's 5s for requests in flight, with room", stop)
	}
	cred, _, ok := strings.Cut(unit["LoadCredential"], ":")
	argv := strings.Fields(unit["ExecStart"])
	if !ok || !strings.Contains(unit["ExecStart"], "--token-file %d/"+cred) {
		t.Fatalf("ExecStart %q does not read the token from the credential %q", unit["ExecStart"], cred)
	}

	// The credential as systemd makes it, a working folder, a home.
	dir := t.TempDir()
	creds, work, home := filepath.Join(dir, "creds"), filepath.Join(dir, "work"), filepath.Join(dir, "home")
	for _, d := range []string{creds, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	const token = "c3JlZGVudGlhbA=="
	if err := os.WriteFile(filepath.Join(creds, cred), []byte(token+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	argv[0] = cqBin
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(a, "%d", creds)
		if a == "--listen" && i+1 < len(argv) {
			// The unit's address, on a port free here.
			host, _, err := net.SplitHostPort(argv[i+1])
			if err != nil {
				t.Fatal(err)
			}
			argv[i+1] = net.JoinHostPort(host, "0")
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+home)
	cmd.Dir = work
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	var port string
	waitFor(t, "serve.started", func() (bool, string) {
		first, _, _ := strings.Cut(stderr.String(), "\n")
		var v struct{ Msg, Addr string }
		if json.Unmarshal([]byte(first), &v) != nil || v.Msg != "serve.started" {
			return false, stderr.String()
		}
		_, port, _ = net.SplitHostPort(v.Addr)
		return true, ""
	})
	post := func(auth string) (int, map[string]any) {
		req, err := http.NewRequest("POST", "http://127.0.0.1:"+port+"/tasks", strings.NewReader(`{"shell":"pwd"}`))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Fatalf("POST /tasks without the token: %d, want 401", code)
	}
	code, task := post(token)
	if code != http.StatusCreated || task["cwd"] != work {
		t.Fatalf("POST /tasks with the token: %d %v; want 201, cwd %s", code, task, work)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cq serve exit after SIGTERM: %v, want 0; stderr:\n%s", err, stderr.String())
	}
	if took := time.Since(start); took > stop-3*time.Second {
		t.Fatalf("stop took %v", took)
	}
	if strings.Contains(stderr.String(), token) {
		t.Fatalf("the token is in the log:\n%s", stderr.String())
	}
}
