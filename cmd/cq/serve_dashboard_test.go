package main

import (
	"context"
	"fmt"
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
	chrome := needChromium(t)
	e := newBackendEnv(t, 60*time.Second, true)
	e.ok("enqueue", "--id", "before", "--", "true")
	e.ok("schedule", "add", "nightly", "30 2 * * *", "--tz", "Europe/Berlin", "--", "./backup.sh")
	s := startStreamServer(t, e)

	b := openBrowser(t, chrome, s)
	ctx, do, text := b.ctx, b.do, b.text
	// The first Run starts the browser, under ctx alone (no timeout).
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	do("the dashboard lists the tasks", chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="before"]`)))
	do("the dashboard lists the schedules", chromedp.WaitVisible(chromedp.CSS(`#schedules tr[data-schedule="nightly"]`)))
	if got := text(`#schedules tr[data-schedule="nightly"]`); !strings.Contains(got, "30 2 * * *") || !strings.Contains(got, "Europe/Berlin") {
		t.Errorf("the schedule's row: %q", got)
	}
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
	// The page reads health every 5 s: the picture shows it once the
	// worker's first pass has been seen.
	eventually(t, 30*time.Second, "the page shows health ok", func() (bool, string) {
		h := text(`#health`)
		return strings.HasPrefix(h, "health: ok"), h
	})
	b.screenshot("dashboard.png")
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

// needChromium is the path of Debian's Chromium; the test skips, saying
// so, where it is not installed.
func needChromium(t *testing.T) string {
	t.Helper()
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (make browser installs it where it can): the dashboard's browser test is skipped")
	}
	return chrome
}

// browserPage is a headless Chromium driven by the test, and the
// dashboard's server.
type browserPage struct {
	t   *testing.T
	ctx context.Context
	srv *gwProc
}

// openBrowser starts a headless Chromium for the test (stopped by
// t.Cleanup); nothing is loaded yet.
func openBrowser(t *testing.T, chrome string, srv *gwProc) *browserPage {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1100, 900))...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	return &browserPage{t: t, ctx: ctx, srv: srv}
}

// do runs steps, each bounded; the browser lives as long as the test.
func (b *browserPage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		b.t.Fatalf("%s: %v\ncq serve stderr:\n%s", what, err, b.srv.stderr.String())
	}
}

// text is the text of the first element sel selects, "" when none.
func (b *browserPage) text(sel string) string {
	c, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, _ := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
	return v
}

// eval is the value of a JavaScript expression.
func (b *browserPage) eval(expr string) string {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot writes the whole page as a PNG into bin/ for people to look
// at.
func (b *browserPage) screenshot(name string) {
	b.t.Helper()
	shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if root, err := filepath.Abs("../../bin"); err == nil && os.MkdirAll(root, 0o755) == nil {
		if err := os.WriteFile(filepath.Join(root, name), shot, 0o644); err == nil {
			b.t.Logf("screenshot: %s", filepath.Join(root, name))
		}
	}
}

// tabTo presses Tab until the focused element's accessible label (its
// aria-label, else its text) is label, as a keyboard user reaches a
// control; at most 80 presses.
func (b *browserPage) tabTo(label string) {
	b.t.Helper()
	const focused = `(() => { const a = document.activeElement; return a ? (a.getAttribute("aria-label") || a.textContent || a.id || a.tagName) : ""; })()`
	var seen []string
	for range 80 {
		b.do("press Tab", chromedp.KeyEvent("\t"))
		got := b.eval(focused)
		if got == label {
			return
		}
		seen = append(seen, got)
	}
	b.t.Fatalf("Tab never reached %q; focus went through %q", label, seen)
}

// TestServeDashboardKeyboard: the dashboard served off loopback with a
// token, used from the keyboard alone, at a phone's width. The page loads
// without the token, asks for it (the field focused), and with it reads
// the queue and follows the events (sent in a header, the stream too);
// Tab reaches the queue's Pause button and a question's Approve button,
// Enter presses them; nothing overflows the phone's width. It writes
// bin/dashboard-phone.png.
func TestServeDashboardKeyboard(t *testing.T) {
	chrome := needChromium(t)
	e := newBackendEnv(t, 60*time.Second, true)
	const token = "dash-Token_7"
	tf := writeToken(t, e, "token", token+"\n", 0o600)
	e.ok("enqueue", "--id", "first", "--queue", "q", "--", "true")
	s := startGateway(t, e, "--listen", "0.0.0.0:0", "--token-file", tf)
	b := openBrowser(t, chrome, s)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	b.do("open the dashboard", chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS(`#token-form`)))
	if id := b.eval(`document.activeElement.id`); id != "token" {
		t.Errorf("the token field is not focused: %q is", id)
	}
	if strings.Contains(b.text(`#tasks tbody`), "first") {
		t.Fatal("the page lists tasks before it has the token")
	}
	b.do("type the token and Enter", chromedp.KeyEvent(token+"\r"))
	b.do("the tasks are listed", chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="first"]`)))
	eventually(t, 30*time.Second, "the page follows the events", func() (bool, string) {
		live := b.text(`#live`)
		return strings.HasPrefix(live, "live"), live
	})
	e.ok("enqueue", "--id", "gate", "--queue", "q", "--shell", `cq ask "deploy?" && echo deployed`)
	b.do("a task enqueued now appears", chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="gate"]`)))

	// Pause the queue from the keyboard; the server stores it.
	b.tabTo("Pause queue q")
	b.do("press Enter", chromedp.KeyEvent("\r"))
	eventually(t, 30*time.Second, "queue q paused", func() (bool, string) {
		out := e.ok("queue", "ls", "-o", "json")
		return strings.Contains(out, `"paused": true`), out
	})
	eventually(t, 30*time.Second, "the page shows q paused", func() (bool, string) {
		v := b.text(`#queues tr[data-queue="q"] td.paused`)
		return v == "paused", v
	})
	// The focus stays on the button through the re-render, now Resume.
	if got := b.eval(`document.activeElement.getAttribute("aria-label") || ""`); got != "Resume queue q" {
		t.Errorf("after pausing, the focus is on %q", got)
	}
	b.do("press Enter again", chromedp.KeyEvent("\r"))
	eventually(t, 30*time.Second, "queue q resumed", func() (bool, string) {
		out := e.ok("queue", "ls", "-o", "json")
		return strings.Contains(out, `"paused": false`), out
	})

	// Answer a question from the keyboard.
	startBgWorker(t, e, "--concurrency", "2")
	b.do("the question appears", chromedp.WaitVisible(chromedp.CSS(`#asks button.approve`)))
	b.tabTo("Approve: deploy?")
	b.do("press Enter", chromedp.KeyEvent("\r"))
	eventually(t, 30*time.Second, "task gate done on the page", func() (bool, string) {
		st := b.text(`#tasks tr[data-id="gate"] td.state`)
		return st == "done", st
	})
	if out := e.ok("logs", "gate"); out != "deployed\n" {
		t.Errorf("gate's output %q", out)
	}

	// At a phone's width nothing makes the page scroll sideways (wide
	// tables scroll inside their own box).
	if w := b.eval(`String(document.documentElement.scrollWidth) + " " + String(window.innerWidth)`); func() bool {
		var sw, iw int
		_, err := fmt.Sscan(w, &sw, &iw)
		return err != nil || sw > iw
	}() {
		t.Errorf("the page is wider than the phone (scrollWidth innerWidth: %s)", w)
	}
	b.screenshot("dashboard-phone.png")
}
