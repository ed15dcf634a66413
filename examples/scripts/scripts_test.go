// Package scripts holds runnable examples; these tests run each one
// against a freshly built cq so that none can go stale.
package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var cqBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cq-examples")
	if err != nil {
		panic(err)
	}
	cqBin = filepath.Join(dir, "cq")
	build := exec.Command("go", "build", "-o", cqBin, "github.com/cq-dev/cq/cmd/cq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic("building cq: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// script runs an example with a private home and returns its output.
func script(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./"+name, args...)
	cmd.Env = append(os.Environ(), "CQ_HOME="+filepath.Join(t.TempDir(), "home"), "CQ="+cqBin,
		"PATH="+filepath.Dir(cqBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestDemo(t *testing.T) {
	t.Parallel()
	out, err := script(t, nil, "demo.sh", cqBin)
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"deploying", "no luck", "succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestCIPipeline(t *testing.T) {
	t.Parallel()
	out, err := script(t, []string{"CQ_PIPELINE_WORKER=1"}, "ci-pipeline.sh", "main", "3")
	if err != nil {
		t.Fatalf("ci-pipeline.sh: %v\n%s", err, out)
	}
	want := "shard 1 ok\nshard 2 ok\nshard 3 ok\n"
	if !strings.Contains(out, want) {
		t.Fatalf("pipeline report = %q, want it to hold %q", out, want)
	}
}

func TestHandlers(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	work := t.TempDir()
	src := filepath.Join(work, "site")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "index.html"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	cq := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cqBin, args...)
		cmd.Env = append(os.Environ(), "CQ_HOME="+home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cq %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	dest := filepath.Join(work, "site.tgz")
	log := filepath.Join(work, "notes.log")
	archive := cq("enqueue", "--intent", "archive", "--payload", `{"src":"`+src+`","dest":"`+dest+`"}`)
	notify := cq("enqueue", "--intent", "notify", "--payload", `{"log":"`+log+`","text":"archived"}`, "--after", archive)
	missing := cq("enqueue", "--intent", "nosuch")
	handlers, _ := filepath.Abs("handlers")
	cq("worker", "--once", "--handlers", handlers)
	if st, err := os.Stat(dest); err != nil || st.Size() == 0 {
		t.Fatalf("archive produced no tarball: %v", err)
	}
	if out := cq("logs", archive); !strings.Contains(out, "archived "+src) {
		t.Fatalf("archive output %q", out)
	}
	notes, err := os.ReadFile(log)
	if err != nil || string(notes) != notify+" archived\n" {
		t.Fatalf("notify log = %q, %v", notes, err)
	}
	// A missing handler fails the run and is not retried.
	if st := cq("show", missing, "-o", "json"); !strings.Contains(st, `"state": "failed"`) || !strings.Contains(st, "missing handler") {
		t.Fatalf("task with a missing handler: %s", st)
	}
}
