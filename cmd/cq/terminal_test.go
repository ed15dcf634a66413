package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
)

// terminalEnv is a store with tasks in several states, one with a command
// far longer than any terminal (a tab and wide characters in it), one
// with env, key and timeout, and runs; and the environment for cq on a
// pty with colours allowed and no width forced.
func terminalEnv(t *testing.T) (e *cqEnv, env []string, long, rich string) {
	t.Helper()
	e = newCQEnv(t, 30*time.Second, true)
	for _, kv := range e.env {
		switch {
		case strings.HasPrefix(kv, "COLUMNS="), strings.HasPrefix(kv, "NO_COLOR="), strings.HasPrefix(kv, "TERM="):
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "TERM=xterm")
	e.ok("enqueue", "--", "sh", "-c", "exit 3")
	long = strings.TrimSpace(e.ok("enqueue", "--", "echo", "start\tof a command 日本語 "+strings.Repeat("and on ", 50)+"end"))
	rich = strings.TrimSpace(e.ok("enqueue", "--key", "k1", "--env", "A=1", "--env", "B=2", "--timeout", "5s", "--", "true"))
	if _, errs, code := e.run("worker", "--once"); code != 0 {
		t.Fatalf("cq worker --once: exit %d: %s", code, errs)
	}
	e.ok("enqueue", "--", "true")
	e.ok("enqueue", "--hold", "--", "true")
	return e, env, long, rich
}

var sgrCode = regexp.MustCompile("\x1b\\[[0-9;]*m")

// checkFits fails unless every line of out is at most cols wide on the
// screen and has no tab in it.
func checkFits(t *testing.T, what, out string, cols int) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if w := runewidth.StringWidth(sgrCode.ReplaceAllString(l, "")); w > cols {
			t.Errorf("%s at %d columns: a line %d wide: %q", what, cols, w, l)
		}
		if strings.Contains(l, "\t") {
			t.Errorf("%s at %d columns: a raw tab in %q", what, cols, l)
		}
	}
}

func TestTerminalTablesFit(t *testing.T) {
	e, env, long, rich := terminalEnv(t)
	for _, cols := range []int{80, 200} {
		out, code := runPTY(t, env, e.dir, cols, 40, "ls", "--limit", "4")
		if code != 0 {
			t.Fatalf("cq ls at %d columns: exit %d:\n%s", cols, code, out)
		}
		checkFits(t, "cq ls", out, cols)
		if !strings.HasSuffix(out, "\n4 of 5 shown; --limit 0 for all\n") {
			t.Errorf("cq ls --limit 4 at %d columns does not end with the left-out note:\n%s", cols, out)
		}
		if !strings.Contains(out, "…") {
			t.Errorf("cq ls at %d columns: no cell cut with …:\n%s", cols, out)
		}
		if !strings.Contains(out, "\x1b[") {
			t.Errorf("cq ls at %d columns: no colour on a terminal:\n%s", cols, out)
		}

		out, _ = runPTY(t, env, e.dir, cols, 40, "ls")
		checkFits(t, "cq ls", out, cols)
		if strings.Contains(out, "shown;") || strings.Count(out, "\n") != 6 {
			t.Errorf("cq ls at %d columns, everything shown: want a header and 5 rows, no note:\n%s", cols, out)
		}

		out, code = runPTY(t, env, e.dir, cols, 40, "show", long)
		if code != 0 {
			t.Fatalf("cq show at %d columns: exit %d:\n%s", cols, code, out)
		}
		checkFits(t, "cq show", out, cols)
		if plain := sgrCode.ReplaceAllString(out, ""); !strings.Contains(strings.Join(strings.Fields(plain), " "), strings.Repeat("and on ", 50)+"end") {
			t.Errorf("cq show at %d columns does not show the whole command:\n%s", cols, out)
		}

		for _, args := range [][]string{{"queue", "ls"}, {"health"}} {
			out, _ = runPTY(t, env, e.dir, cols, 40, args...)
			checkFits(t, "cq "+strings.Join(args, " "), out, cols)
		}
	}

	// $COLUMNS wins over the terminal's own width.
	out, _ := runPTY(t, append(env, "COLUMNS=50"), e.dir, 200, 40, "ls")
	checkFits(t, "cq ls with COLUMNS=50", out, 50)

	// cq show: what the task has, as label and value lines, then the runs
	// with the age of their start and their length.
	out, _ = runPTY(t, append(env, "NO_COLOR=1"), e.dir, 100, 40, "show", rich)
	for _, re := range []string{
		`(?m)^id +` + rich + `$`, `(?m)^state +done$`, `(?m)^command +true$`, `(?m)^env +A=1\n +B=2$`,
		`(?m)^timeout +5s$`, `(?m)^key +k1$`, `(?m)^created_at +\S+Z \((just now|\d+s ago)\)$`,
		`(?m)^RUN +ATTEMPT +STATE +EXIT +WORKER +STARTED +DURATION +ERROR$`,
		`(?m)^\S+ +1 +succeeded +0 +\S+ +(just now|\d+s ago) +\d+(ms|\.\ds)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("cq show on a terminal does not match %s:\n%s", re, out)
		}
	}

	// No colour with NO_COLOR set to anything, nor on a dumb terminal.
	for _, kv := range []string{"NO_COLOR=1", "TERM=dumb"} {
		for _, args := range [][]string{{"ls"}, {"show", rich}} {
			out, _ := runPTY(t, append(env, kv), e.dir, 80, 40, args...)
			if strings.Contains(out, "\x1b") {
				t.Errorf("cq %s with %s: escape codes in %q", strings.Join(args, " "), kv, out)
			}
		}
	}

	// Piped, nothing is cut, nor told as an age, and no note is added.
	piped := e.ok("ls", "--limit", "4")
	if strings.Count(piped, "\n") != 5 || strings.Contains(piped, "shown;") || strings.Contains(piped, "…") ||
		!strings.Contains(piped, strings.Repeat("and on ", 50)+"end") {
		t.Errorf("cq ls --limit 4, piped: want the header and 4 whole rows:\n%s", piped)
	}
}
