package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestServeDashboard opens the dashboard in headless Chromium (Debian's,
// installed by make browser): a task enqueued with the CLI appears on the
// open page and turns done without a reload; a question is answered with
// the page's Approve button. It writes a screenshot of the page to
// bin/dashboard.png for people to look at.
func TestServeDashboard(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (make browser installs it where it can): the dashboard's browser test is skipped")
	}
	e := newBackendEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "before", "--", "true")
	s := startStreamServer(t, e)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1100, 900))...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(alloc)
	defer cancelCtx()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		// Each step is bounded; the browser lives as long as ctx.
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v\ncq serve stderr:\n%s", what, err, s.stderr.String())
		}
	}
	text := func(sel string) string {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, _ := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		return v
	}
	// The first Run starts the browser, under ctx alone (no timeout).
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	do("the dashboard lists the tasks", chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="before"]`)))
	// The marker lasts only as long as the page is not reloaded.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.cqMarker = "kept"`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the page follows the events", func() (bool, string) {
		live := text(`#live`)
		return strings.HasPrefix(live, "live"), live
	})

	// A task enqueued now appears, and turns done when a worker runs it.
	e.ok("enqueue", "--id", "fresh", "--shell", "echo hello from fresh")
	e.ok("enqueue", "--id", "gate", "--shell", `cq ask "ship it?" && echo shipped`)
	do("the new task appears", chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="fresh"]`)))
	startBgWorker(t, e, "--concurrency", "2")
	eventually(t, 30*time.Second, "task fresh done on the page", func() (bool, string) {
		st := text(`#tasks tr[data-id="fresh"] td.state`)
		return st == "done", st
	})

	// The question shows with its buttons; Approve answers it.
	do("the question appears", chromedp.WaitVisible(chromedp.CSS(`#asks button.approve`)))
	if q := text(`#asks .q`); q != "ship it?" {
		t.Errorf("question on the page = %q", q)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if root, err := filepath.Abs("../../bin"); err == nil && os.MkdirAll(root, 0o755) == nil {
		if err := os.WriteFile(filepath.Join(root, "dashboard.png"), shot, 0o644); err == nil {
			t.Logf("screenshot: %s", filepath.Join(root, "dashboard.png"))
		}
	}
	do("approve", chromedp.Click(chromedp.CSS(`#asks button.approve`)))
	eventually(t, 30*time.Second, "task gate done on the page", func() (bool, string) {
		st := text(`#tasks tr[data-id="gate"] td.state`)
		return st == "done", st
	})
	if out := e.ok("logs", "gate"); out != "shipped\n" {
		t.Errorf("gate's output %q", out)
	}
	if marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.cqMarker)`)); err != nil || marker != "kept" {
		t.Errorf("the page was reloaded (marker %q, %v)", marker, err)
	}

	// The task page shows the task's runs and its output.
	do("open the task page", chromedp.Navigate(s.base+"/#task/fresh"),
		chromedp.WaitVisible(chromedp.CSS(`#task-runs tbody tr`)))
	eventually(t, 30*time.Second, "the task page's output", func() (bool, string) {
		out := text(`#task-log`)
		return strings.Contains(out, "hello from fresh"), out
	})
}
