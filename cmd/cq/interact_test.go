package main

// Runs that talk back, through the real binary on the backend
// $CQ_TEST_DB chooses: cq ask and cq answer (approve, deny, timeout, a
// cancel and a worker's shutdown during a question), cq send and cq recv
// (each message once, in order, across attempts), cq progress (rate-limited
// events, the latest always kept).

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// wkQuestion is a question as cq prints it.
type wkQuestion struct {
	ID       int64   `json:"id"`
	TaskID   string  `json:"task_id"`
	RunID    string  `json:"run_id"`
	Question string  `json:"question"`
	State    string  `json:"state"`
	Reason   *string `json:"reason"`
	AskedAt  string  `json:"asked_at"`
}

// interactTask is what cq show prints of a task's questions, messages
// and progress.
type interactTask struct {
	State     string       `json:"state"`
	Question  *wkQuestion  `json:"question"`
	Questions []wkQuestion `json:"questions"`
	Progress  *struct {
		Done    *int64  `json:"done"`
		Total   *int64  `json:"total"`
		Message *string `json:"message"`
	} `json:"progress"`
	Messages []struct {
		Body       string  `json:"body"`
		ReceivedBy *string `json:"received_by"`
	} `json:"messages"`
	Runs []wkRun `json:"runs"`
}

func (e *wkEnv) interact(id string) interactTask {
	e.t.Helper()
	var t interactTask
	out := e.ok("show", "-o", "json", id)
	if err := json.Unmarshal([]byte(out), &t); err != nil {
		e.t.Fatalf("cq show %s: %v\n%s", id, err, out)
	}
	return t
}

// openQuestions is cq asks -o json, by task id.
func (e *wkEnv) openQuestions() map[string]wkQuestion {
	e.t.Helper()
	var qs []wkQuestion
	out := e.ok("asks", "-o", "json")
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		e.t.Fatalf("cq asks: %v\n%s", err, out)
	}
	m := map[string]wkQuestion{}
	for _, q := range qs {
		m[q.TaskID] = q
	}
	return m
}

// waitAsking waits until task id has an open question.
func (e *wkEnv) waitAsking(id string) wkQuestion {
	e.t.Helper()
	var q wkQuestion
	e.eventually(30*time.Second, "task "+id+" asking", func() (bool, string) {
		var ok bool
		q, ok = e.openQuestions()[id]
		return ok, e.show(id).String()
	})
	return q
}

func (e *wkEnv) fileText(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func TestInteractAskAnswer(t *testing.T) {
	e := wkNewEnv(t)
	e.startWorker("w", "--concurrency", "4")
	for _, id := range []string{"yes", "no"} {
		e.ok("enqueue", "--id", id, "--shell", `cq ask "deploy `+id+`?" > `+id+`.out 2>&1; echo "exit=$?" >> `+id+`.out`)
	}
	e.ok("enqueue", "--id", "late", "--shell", `cq ask "too slow?" --timeout 1s > late.out 2>&1; echo "exit=$?" >> late.out`)
	q := e.waitAsking("yes")
	e.waitAsking("no")
	if q.Question != "deploy yes?" || q.State != "open" || q.RunID == "" {
		t.Errorf("cq asks: %+v", q)
	}
	// cq ls and cq show mark the run as waiting for an answer.
	var ls []struct {
		ID       string      `json:"id"`
		Question *wkQuestion `json:"question"`
	}
	if err := json.Unmarshal([]byte(e.ok("ls", "-o", "json")), &ls); err != nil {
		t.Fatal(err)
	}
	for _, tk := range ls {
		if tk.Question == nil || tk.Question.Question != "deploy "+tk.ID+"?" {
			if tk.ID != "late" {
				t.Errorf("cq ls: task %s's question = %+v", tk.ID, tk.Question)
			}
		}
	}
	if got := e.interact("yes"); got.Question == nil || got.Question.State != "open" {
		t.Errorf("cq show yes: question %+v", got.Question)
	}

	if out := e.ok("answer", "yes", "--approve", "--reason", "ship it", "-o", "json"); !strings.Contains(out, `"approved"`) {
		t.Errorf("cq answer -o json: %s", out)
	}
	e.ok("answer", "no", "--deny", "--reason", "not today")
	e.waitTask("yes", "done", 30*time.Second)
	e.waitTask("no", "done", 30*time.Second)
	e.waitTask("late", "done", 30*time.Second)
	if got := e.fileText("yes.out"); got != "ship it\nexit=0\n" {
		t.Errorf("approved cq ask printed %q", got)
	}
	if got := e.fileText("no.out"); got != "cq: denied: not today\nexit=1\n" {
		t.Errorf("denied cq ask printed %q", got)
	}
	if got := e.fileText("late.out"); got != "cq: denied: timeout\nexit=1\n" {
		t.Errorf("timed-out cq ask printed %q", got)
	}
	if got := e.interact("late"); len(got.Questions) != 1 || got.Questions[0].State != "denied" || nullStr(got.Questions[0].Reason) != "timeout" {
		t.Errorf("cq show late: questions %+v", got.Questions)
	}

	// Answers to nothing open, and bad answers.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"answer", "yes", "--approve"}, 3},
		{[]string{"answer", "nosuch", "--approve"}, 4},
		{[]string{"answer", "yes"}, 1},
		{[]string{"answer", "yes", "--approve", "--deny"}, 1},
		{[]string{"ask", "outside a task"}, 1},
	} {
		if _, errs, code := e.run(c.args...); code != c.code || strings.Count(errs, "\n") != 1 {
			t.Errorf("cq %s: exit %d, stderr %q; want %d and one line", strings.Join(c.args, " "), code, errs, c.code)
		}
	}
	var asked, approved, denied int
	for _, ev := range e.events() {
		switch {
		case ev.Kind == "run.asked":
			asked++
		case ev.Kind == "run.answered" && strings.Contains(string(ev.Data), `"approved":true`):
			approved++
		case ev.Kind == "run.answered":
			denied++
		}
	}
	if asked != 3 || approved != 1 || denied != 2 {
		t.Errorf("events: %d run.asked, %d approved, %d denied; want 3, 1, 2", asked, approved, denied)
	}
}

// TestInteractAskCancelAndShutdown: a cancel of the task denies its open
// question at once; a worker's graceful stop denies the questions of its
// runs ("shutdown") and releases those runs (their tasks back to todo,
// no retry spent), and cq ask returns the deny.
func TestInteractAskCancelAndShutdown(t *testing.T) {
	e := wkNewEnv(t)
	w := e.startWorker("w", "--concurrency", "2", "--grace", "20s")
	e.ok("enqueue", "--id", "cancelme", "--shell", `cq ask "wait for me?"; sleep 100`)
	e.ok("enqueue", "--id", "stopme", "--retries", "0", "--shell",
		`trap 'echo trapped >> stopme.out' TERM; cq ask "still there?" > stopme.out 2>&1; echo "exit=$?" >> stopme.out`)
	e.waitAsking("cancelme")
	e.waitAsking("stopme")

	e.ok("cancel", "cancelme")
	e.waitTask("cancelme", "cancelled", 30*time.Second)
	got := e.interact("cancelme")
	if len(got.Questions) != 1 || got.Questions[0].State != "denied" || nullStr(got.Questions[0].Reason) != "cancelled" {
		t.Errorf("cancelled task's questions: %+v", got.Questions)
	}

	w.stop()
	tk := e.waitTask("stopme", "todo", 10*time.Second)
	if len(tk.Runs) != 1 || tk.Runs[0].State != "cancelled" || nullStr(tk.Runs[0].Reason) != "released" {
		t.Errorf("stopme after the worker's stop: %v; want its run cancelled, released", tk)
	}
	out := e.fileText("stopme.out")
	if !strings.Contains(out, "cq: denied: shutdown\n") || !strings.Contains(out, "exit=1\n") {
		t.Errorf("cq ask at the worker's stop printed %q; want the deny for the shutdown, exit 1", out)
	}
	got = e.interact("stopme")
	if len(got.Questions) != 1 || got.Questions[0].State != "denied" || nullStr(got.Questions[0].Reason) != "shutdown" {
		t.Errorf("stopme's questions: %+v", got.Questions)
	}
	if len(e.openQuestions()) != 0 {
		t.Errorf("cq asks after the stop: %v", e.openQuestions())
	}
}

// TestInteractAskTimeNotCounted: the time a run waits for an answer is not
// counted by its run timeout.
func TestInteractAskTimeNotCounted(t *testing.T) {
	e := wkNewEnv(t)
	e.startWorker("w")
	e.ok("enqueue", "--id", "slow", "--timeout", "2s", "--shell", `cq ask "go on?" --timeout 0 && echo answered > slow.out`)
	q := e.waitAsking("slow")
	asked, err := time.Parse(time.RFC3339Nano, q.AskedAt)
	if err != nil {
		t.Fatal(err)
	}
	// The question waits past the run's whole timeout.
	e.eventually(30*time.Second, "the question open for 3 s", func() (bool, string) {
		_, open := e.openQuestions()["slow"]
		return !open || time.Since(asked) > 3*time.Second, e.show("slow").String()
	})
	if _, open := e.openQuestions()["slow"]; !open {
		t.Fatalf("the question was closed before it was answered: %v", e.show("slow"))
	}
	e.ok("answer", "slow", "--approve")
	tk := e.waitTask("slow", "done", 30*time.Second)
	if tk.Runs[0].State != "succeeded" {
		t.Errorf("slow: %v", tk)
	}
}

// TestInteractAskTimeCounted: the runs of a queue set with
// --timeout-counts-asks true have their waits for answers counted by their
// time limit: a run still asking at its limit is stopped as timed out, and
// its question is closed with it. A run of another queue, asking as long,
// is spared.
func TestInteractAskTimeCounted(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("queue", "set", "counts", "--timeout-counts-asks", "true", "--timeout-retries", "0")
	e.ok("queue", "set", "spares", "--timeout-retries", "0")
	// --grace 0: the kill at the limit is a SIGKILL, so that cq ask never
	// gets to close its question itself ("interrupted", on a SIGTERM): the
	// question is left open and reads as closed by the run's end.
	e.startWorker("w", "--concurrency", "2", "--grace", "0")
	e.ok("enqueue", "--id", "spared", "--queue", "spares", "--timeout", "2s", "--shell",
		`cq ask "go on?" --timeout 0 && echo answered > spared.out`)
	e.ok("enqueue", "--id", "counted", "--queue", "counts", "--timeout", "2s", "--shell",
		`cq ask "go on?" --timeout 0 && echo answered > counted.out`)
	spared := e.waitAsking("spared")
	e.waitAsking("counted")
	tk := e.waitTask("counted", "failed", 30*time.Second)
	if len(tk.Runs) != 1 || tk.Runs[0].State != "timeout" {
		t.Fatalf("counted: %v; want one run, timed out", tk)
	}
	r := tk.Runs[0]
	started, err1 := time.Parse(time.RFC3339Nano, nullStr(r.StartedAt))
	ended, err2 := time.Parse(time.RFC3339Nano, nullStr(r.EndedAt))
	if err1 != nil || err2 != nil {
		t.Fatalf("counted's run times: %v, %v", err1, err2)
	}
	if d := ended.Sub(started); d < 2*time.Second || d > 15*time.Second {
		t.Errorf("counted's run lasted %v; want it stopped at its 2 s limit", d)
	}
	got := e.interact("counted")
	if len(got.Questions) != 1 || got.Questions[0].State != "denied" || nullStr(got.Questions[0].Reason) != "run ended" {
		t.Errorf("counted's questions: %+v; want one, denied: run ended", got.Questions)
	}
	if _, open := e.openQuestions()["counted"]; open {
		t.Errorf("cq asks lists the question of counted's ended run")
	}
	// The other queue's run asks on past its limit, until it is answered.
	asked, err := time.Parse(time.RFC3339Nano, spared.AskedAt)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually(30*time.Second, "spared's question open for 3 s", func() (bool, string) {
		_, open := e.openQuestions()["spared"]
		return !open || time.Since(asked) > 3*time.Second, e.show("spared").String()
	})
	if _, open := e.openQuestions()["spared"]; !open {
		t.Fatalf("spared's question was closed before it was answered: %v", e.show("spared"))
	}
	e.ok("answer", "spared", "--approve")
	if tk := e.waitTask("spared", "done", 30*time.Second); tk.Runs[0].State != "succeeded" {
		t.Errorf("spared: %v", tk)
	}
	if e.fileText("spared.out") != "answered\n" {
		t.Errorf("spared.out: %q", e.fileText("spared.out"))
	}
}

// TestInteractMessages: messages are received once each, in the order
// sent; those a run did not receive before it ended go to the task's next
// attempt; cq recv --wait wakes for a message.
func TestInteractMessages(t *testing.T) {
	e := wkNewEnv(t)
	e.ok("queue", "set", "default", "--backoff", "100ms")
	e.startWorker("w")
	e.ok("enqueue", "--id", "m", "--retries", "1", "--shell", `
while [ ! -e go1 ]; do sleep 0.02; done
cq recv >> got.txt
cq recv >> got.txt
if [ "$CQ_ATTEMPT" = 1 ]; then
	touch ready2
	while [ ! -e go2 ]; do sleep 0.02; done
	exit 1
fi
touch ready3
cq recv --wait 30s >> got.txt`)
	e.waitRunning("m", 1)
	for _, m := range []string{"one", "two", "three"} {
		e.ok("send", "m", m)
	}
	if err := os.WriteFile(e.path("go1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitFile("ready2")
	e.ok("send", "m", "four", "words")
	if err := os.WriteFile(e.path("go2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitFile("ready3")
	e.ok("send", "m", "five")
	e.waitTask("m", "done", 30*time.Second)
	if got := e.fileText("got.txt"); got != "one\ntwo\nthree\nfour words\nfive\n" {
		t.Errorf("received %q", got)
	}
	got := e.interact("m")
	if len(got.Messages) != 5 || got.Runs == nil || len(got.Runs) != 2 {
		t.Fatalf("cq show m: %d messages, %d runs", len(got.Messages), len(got.Runs))
	}
	for i, m := range got.Messages {
		want := got.Runs[0].ID
		if i >= 3 {
			want = got.Runs[1].ID
		}
		if nullStr(m.ReceivedBy) != want {
			t.Errorf("message %q received by %s, want %s", m.Body, nullStr(m.ReceivedBy), want)
		}
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"send", "m", "too late"}, 3},
		{[]string{"send", "nosuch", "hi"}, 4},
		{[]string{"send", "m", "two\nlines"}, 1},
		{[]string{"recv"}, 1},
	} {
		if _, errs, code := e.run(c.args...); code != c.code || strings.Count(errs, "\n") != 1 {
			t.Errorf("cq %q: exit %d, stderr %q; want %d and one line", c.args, code, errs, c.code)
		}
	}
	var sent, received int
	for _, ev := range e.events() {
		switch ev.Kind {
		case "task.message":
			sent++
		case "run.received":
			received++
		}
	}
	if sent != 5 || received != 3 {
		t.Errorf("events: %d task.message, %d run.received; want 5, 3", sent, received)
	}
}

// TestInteractProgress: every report updates the run's progress at once;
// run.progress events are at least a quarter of a second apart, and the
// latest report gets one (from the heartbeat when it was held back).
func TestInteractProgress(t *testing.T) {
	e := wkNewEnv(t)
	e.startWorker("w")
	e.ok("enqueue", "--id", "p", "--shell", `
for i in $(seq 1 30); do cq progress --done $i --total 30 "step $i"; done
touch reported
while [ ! -e go ]; do sleep 0.02; done`)
	e.waitFile("reported")
	got := e.interact("p")
	if got.Progress == nil || got.Progress.Done == nil || *got.Progress.Done != 30 || *got.Progress.Total != 30 || nullStr(got.Progress.Message) != "step 30" {
		t.Fatalf("cq show p: progress %+v", got.Progress)
	}
	var lsp []struct {
		ID       string `json:"id"`
		Progress *struct {
			Done *int64 `json:"done"`
		} `json:"progress"`
	}
	if err := json.Unmarshal([]byte(e.ok("ls", "-o", "json", "--state", "doing")), &lsp); err != nil || len(lsp) != 1 || lsp[0].Progress == nil || *lsp[0].Progress.Done != 30 {
		t.Errorf("cq ls: %+v, %v", lsp, err)
	}
	type prog struct {
		at   time.Time
		done int64
	}
	progress := func() []prog {
		var out []prog
		for _, ev := range e.events() {
			if ev.Kind != "run.progress" {
				continue
			}
			var d struct {
				Done int64 `json:"done"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			at, err := time.Parse(time.RFC3339Nano, ev.At)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, prog{at, d.Done})
		}
		return out
	}
	// The latest report's event comes with a heartbeat at the latest.
	var ps []prog
	e.eventually(30*time.Second, "a run.progress event of done 30", func() (bool, string) {
		e.ok("heartbeat", "-q")
		ps = progress()
		return len(ps) > 0 && ps[len(ps)-1].done == 30, ""
	})
	if len(ps) < 2 || ps[0].done != 1 {
		t.Errorf("run.progress events of done %v; want the first report's and the last's", ps)
	}
	for i := 1; i < len(ps); i++ {
		if gap := ps[i].at.Sub(ps[i-1].at); gap < 250*time.Millisecond {
			t.Errorf("run.progress events %d and %d are %v apart, less than 250ms", i-1, i, gap)
		}
		if ps[i].done <= ps[i-1].done {
			t.Errorf("run.progress events out of order: %v", ps)
		}
	}
	if err := os.WriteFile(e.path("go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitTask("p", "done", 30*time.Second)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"progress", "--done", "1"}, 1},
		{[]string{"progress", "--done", "x"}, 1},
	} {
		if _, errs, code := e.run(c.args...); code != c.code || strings.Count(errs, "\n") != 1 {
			t.Errorf("cq %q: exit %d, stderr %q; want %d and one line", c.args, code, errs, c.code)
		}
	}
}
