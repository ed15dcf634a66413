package main

import (
	"strings"
	"testing"
	"time"
)

// At a terminal, cq enqueue WORD… with no word a task id says how to run
// them as a command (exit 4, as for an unknown id); a word that is a
// task id keeps the plain behaviour. Piped, nothing changes: see
// hints.txtar.
func TestEnqueueWordsHintAtATerminal(t *testing.T) {
	e := newCQEnv(t, 30*time.Second, false)
	out, code := runPTY(t, e.env, e.dir, 120, 24, "enqueue", "echo", "hello world")
	if code != 4 {
		t.Fatalf("exit %d, want 4; output %q", code, out)
	}
	want := `cq: no task "echo"; to run a command, put it after --: cq enqueue -- echo 'hello world'` + "\n"
	if out != want {
		t.Fatalf("output %q, want %q", out, want)
	}

	// An inbox task named among the words: enqueued, the other word reported.
	if _, errOut, code := e.runIn("", "task", "create", "--id", "t1", "--", "true"); code != 0 {
		t.Fatalf("task create: exit %d: %s", code, errOut)
	}
	out, code = runPTY(t, e.env, e.dir, 120, 24, "enqueue", "t1", "nosuch")
	if code != 4 || strings.Contains(out, "enqueue --") || !strings.Contains(out, `no task "nosuch"`) {
		t.Fatalf("exit %d, output %q: want 4 and the unknown id alone, no hint", code, out)
	}
	if got, _, _ := e.runIn("", "show", "t1", "-o", "json"); !strings.Contains(got, `"state": "todo"`) {
		t.Fatalf("t1 not enqueued: %s", got)
	}
}

// At a terminal, cq queue set Q with no setting makes the queue as it
// does piped (queue.txtar), and a hint says there was nothing to set.
func TestQueueSetNothingAtATerminal(t *testing.T) {
	e := newCQEnv(t, 30*time.Second, false)
	out, code := runPTY(t, e.env, e.dir, 120, 24, "queue", "set", "zzz")
	if code != 0 {
		t.Fatalf("exit %d, want 0; output %q", code, out)
	}
	if !strings.HasPrefix(out, "cq: queue zzz: nothing to set; it keeps its settings (give --concurrency, --retries") || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q: want one line saying there was nothing to set", out)
	}
	got, errOut, code := e.runIn("", "queue", "ls", "-q")
	if code != 0 || got != "zzz\n" {
		t.Fatalf("queue ls -q: exit %d, %q %q: want the queue made", code, got, errOut)
	}
	out, code = runPTY(t, e.env, e.dir, 120, 24, "queue", "set", "zzz", "--concurrency", "2")
	if code != 0 || out != "" {
		t.Fatalf("queue set with a setting: exit %d, output %q", code, out)
	}
}
