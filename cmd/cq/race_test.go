package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// These tests prove the store's concurrency rules with real processes on
// one database, as docs/operations.md (The store) promises them: TestMain puts this test
// binary in $PATH as cq, so exec.Command("cq", …) runs the real CLI.

// raceResult is one finished cq process.
type raceResult struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r raceResult) String() string {
	return fmt.Sprintf("cq %s → exit %d\nstdout: %q\nstderr: %q", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// raceEnv runs cq processes in one home and records every one of them.
type raceEnv struct {
	home string
	dir  string // the processes' working folder
	env  []string

	mu      sync.Mutex
	results []raceResult
}

func newRaceEnv(t *testing.T, home string) *raceEnv {
	t.Helper()
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "CQ_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	// Under -race every process would otherwise sleep a second at exit,
	// which spreads the processes out instead of making them collide.
	env = append(env, "CQ_HOME="+home, "GORACE="+gorace)
	if db := testDB(t); db != "" {
		env = append(env, "CQ_DB="+db)
	}
	return &raceEnv{home: home, dir: t.TempDir(), env: env}
}

// start starts one cq process; wait collects it.
func (e *raceEnv) start(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "cq", args...)
	cmd.Env = e.env
	cmd.Dir = e.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Errorf("start cq %v: %v", args, err)
		return nil, nil, nil
	}
	return cmd, &out, &errb
}

func (e *raceEnv) wait(t *testing.T, cmd *exec.Cmd, out, errb *bytes.Buffer, args []string) raceResult {
	t.Helper()
	r := raceResult{args: args, code: -1}
	if cmd == nil {
		return r
	}
	err := cmd.Wait()
	r.stdout, r.stderr = out.String(), errb.String()
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	}
	if err != nil && r.code <= 0 {
		t.Errorf("cq %v: %v (killed at the deadline?)", args, err)
	}
	e.mu.Lock()
	e.results = append(e.results, r)
	e.mu.Unlock()
	return r
}

func (e *raceEnv) run(t *testing.T, ctx context.Context, args ...string) raceResult {
	t.Helper()
	cmd, out, errb := e.start(t, ctx, args...)
	return e.wait(t, cmd, out, errb, args)
}

// checkResults applies docs/commands.md's output rules to every process: an
// allowed exit code; nothing on stderr on success; exactly one "cq: " line
// on a failure; and never "database is locked", anywhere.
func (e *raceEnv) checkResults(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.results {
		if strings.Contains(r.stderr+r.stdout, "database is locked") || strings.Contains(r.stderr, "busy") {
			t.Errorf("a user saw the store's lock:\n%s", r)
			continue
		}
		if r.code != 0 && r.code != 3 && r.code != 4 {
			t.Errorf("unexpected exit code:\n%s", r)
			continue
		}
		if r.code == 0 {
			if r.stderr != "" {
				t.Errorf("a command that succeeded wrote to stderr:\n%s", r)
			}
			continue
		}
		// One "cq: " line per failure: a command given several ids
		// reports each id's failure on its own line.
		maxLines := 1
		if r.args[0] != "task" && r.args[0] != "enqueue" {
			maxLines = len(r.args) - 1
		}
		lines := strings.SplitAfter(r.stderr, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) == 0 || len(lines) > maxLines {
			t.Errorf("a failure must print one \"cq: \" line (per failed id, at most %d) on stderr:\n%s", maxLines, r)
		}
		for _, ln := range lines {
			if !strings.HasPrefix(ln, "cq: ") || !strings.HasSuffix(ln, "\n") {
				t.Errorf("stderr line %q is not a \"cq: \" message:\n%s", ln, r)
			}
		}
	}
}

// logSummary logs how many processes ran and how they ended, so a run
// that exercised nothing shows it.
func (e *raceEnv) logSummary(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	counts := map[string]int{}
	for _, r := range e.results {
		name := r.args[0]
		if name == "task" && len(r.args) > 3 {
			name = "set-state " + r.args[3]
		}
		counts[fmt.Sprintf("%s=%d", name, r.code)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	t.Logf("%d processes (command=exit×count): %s", len(e.results), strings.Join(parts, " "))
}

var raceIDLine = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\n$`)

// raceTask is the part of cq ls -o json these tests read.
type raceTask struct {
	ID     string   `json:"id"`
	State  string   `json:"state"`
	Key    *string  `json:"key"`
	Unique bool     `json:"unique"`
	After  []string `json:"after"`
}

// TestRaceProducersAndOperators runs eight producer processes enqueueing
// tasks (plain, on shared keys, on --unique keys, with --after, through
// the spool) while operator processes cancel, retry, hold and release the
// same tasks. Afterwards every process must have behaved as docs/commands.md
// says, every task must be there exactly once, and every task's events
// must form a valid path through the task state machine (docs/semantics.md).
func TestRaceProducersAndOperators(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hundreds of processes")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newRaceEnv(t, filepath.Join(t.TempDir(), "home"))
	// A follower streams the event log while everything else runs; it
	// must see exactly the final log: no event skipped, none repeated
	// (docs/events.md).
	follower := startRaceFollower(t, ctx, e)

	const producers, perProducer, operators = 8, 25, 6
	uniqueKeys := []string{"uniq-a", "uniq-b", "uniq-c"}
	sharedKeys := []string{"shared-x", "shared-y"}

	// Every id a producer was told it created, and what it expected.
	var (
		mu       sync.Mutex
		created  = map[string]bool{}
		spooled  = map[string]bool{}
		enqueues []raceResult
	)

	var prodWG, opWG sync.WaitGroup
	producersDone := make(chan struct{})
	for p := 0; p < producers; p++ {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			var mine []string
			for j := 0; j < perProducer; j++ {
				args := []string{"enqueue"}
				kind := (p + j) % 6
				switch kind {
				case 1:
					args = append(args, "--key", sharedKeys[rng.IntN(len(sharedKeys))])
				case 2, 3:
					args = append(args, "--key", uniqueKeys[rng.IntN(len(uniqueKeys))], "--unique")
				case 4:
					if len(mine) > 0 {
						args = append(args, "--after", mine[rng.IntN(len(mine))])
					}
				case 5:
					if j%2 == 0 {
						args = append(args, "--spool")
					} else {
						// An --after naming no task: exit 4, nothing stored.
						args = append(args, "--after", fmt.Sprintf("missing-%d-%d", p, j))
					}
				}
				args = append(args, "--", "true")
				r := e.run(t, ctx, args...)
				mu.Lock()
				enqueues = append(enqueues, r)
				mu.Unlock()
				switch {
				case r.code == 0:
					if !raceIDLine.MatchString(r.stdout) {
						t.Errorf("enqueue printed %q, want one id", r.stdout)
						continue
					}
					id := strings.TrimSpace(r.stdout)
					mu.Lock()
					if created[id] {
						t.Errorf("id %s printed twice", id)
					}
					created[id] = true
					if kind == 5 {
						spooled[id] = true
					}
					mu.Unlock()
					if kind != 5 {
						mine = append(mine, id)
					}
				case r.code == 3 && (kind == 2 || kind == 3):
					// A unique key held by another task: its id on stdout.
					if !raceIDLine.MatchString(r.stdout) {
						t.Errorf("a unique-key conflict must print the existing id on stdout:\n%s", r)
					}
				case r.code == 4 && kind == 5:
				default:
					t.Errorf("enqueue ended unexpectedly:\n%s", r)
				}
			}
		}()
	}
	go func() { prodWG.Wait(); close(producersDone) }()

	ops := [][]string{{"cancel"}, {"retry"}, {"hold"}, {"release"}, {"task", "set-state", "", "todo"}, {"task", "set-state", "", "blocked"}}
	for o := 0; o < operators; o++ {
		opWG.Add(1)
		go func() {
			defer opWG.Done()
			rng := rand.New(rand.NewPCG(uint64(o), 2))
			var cancelledByMe []string // retried more often than a random id would be
			for round := 0; ; round++ {
				select {
				case <-producersDone:
					if round >= 10 {
						return
					}
				default:
				}
				if ctx.Err() != nil {
					return
				}
				ls := e.run(t, ctx, "ls", "-q", "--limit", "0")
				ids := strings.Fields(ls.stdout)
				if ls.code != 0 || len(ids) == 0 {
					continue
				}
				for k := 0; k < 3; k++ {
					op := append([]string(nil), ops[rng.IntN(len(ops))]...)
					if op[0] == "task" {
						op[2] = ids[rng.IntN(len(ids))]
					} else {
						// Several ids in one command: each is handled on its own.
						for m := 1 + rng.IntN(3); m > 0; m-- {
							pick := ids[rng.IntN(len(ids))]
							if op[0] == "retry" && len(cancelledByMe) > 0 && rng.IntN(2) == 0 {
								pick = cancelledByMe[rng.IntN(len(cancelledByMe))]
							}
							op = append(op, pick)
						}
					}
					r := e.run(t, ctx, op...)
					if op[0] == "cancel" && r.code == 0 {
						cancelledByMe = append(cancelledByMe, op[1:]...)
					}
					if r.code != 0 && r.code != 3 {
						t.Errorf("operator command ended unexpectedly (want 0, or 3 for a lost race or an illegal transition):\n%s", r)
					}
				}
			}
		}()
	}
	prodWG.Wait()
	opWG.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the processes did not finish in time: %v", ctx.Err())
	}

	ls := e.run(t, ctx, "ls", "-o", "json", "--limit", "0")
	if ls.code != 0 {
		t.Fatalf("final ls:\n%s", ls)
	}
	var tasks []raceTask
	if err := json.Unmarshal([]byte(ls.stdout), &tasks); err != nil {
		t.Fatalf("final ls -o json: %v", err)
	}
	evs := e.run(t, ctx, "events")
	if evs.code != 0 {
		t.Fatalf("events:\n%s", evs)
	}
	follower.check(t, evs.stdout)
	e.checkResults(t)

	// Every successful enqueue, and nothing else, is a task.
	byID := map[string]raceTask{}
	for _, tk := range tasks {
		if _, dup := byID[tk.ID]; dup {
			t.Errorf("task %s listed twice", tk.ID)
		}
		byID[tk.ID] = tk
	}
	if len(tasks) != len(created) {
		t.Errorf("%d tasks stored, %d enqueues succeeded (%d through the spool)", len(tasks), len(created), len(spooled))
	}
	for id := range created {
		if _, ok := byID[id]; !ok {
			t.Errorf("enqueue printed %s (spool: %v) but no such task exists", id, spooled[id])
		}
	}
	for id := range byID {
		if !created[id] {
			t.Errorf("task %s exists but no enqueue printed it", id)
		}
	}
	// A unique-key conflict printed the id of a task that holds the key.
	for _, r := range enqueues {
		if r.code != 3 {
			continue
		}
		key := ""
		for i, a := range r.args {
			if a == "--key" && i+1 < len(r.args) {
				key = r.args[i+1]
			}
		}
		holder, ok := byID[strings.TrimSpace(r.stdout)]
		if !ok || strOf(holder.Key) != key {
			t.Errorf("a unique-key conflict on %q named %q, which is no task with that key:\n%s", key, strings.TrimSpace(r.stdout), r)
		}
	}

	raceCheckEvents(t, evs.stdout, byID, uniqueKeys)
	e.logSummary(t)
	if t.Failed() {
		t.Logf("home kept for inspection: %s", e.home)
	}
}

// raceFollower is a cq events --follow --since 0 process.
type raceFollower struct {
	cmd   *exec.Cmd
	errb  bytes.Buffer
	mu    sync.Mutex
	lines []string
	last  int64
	more  chan struct{} // signalled after each line
	done  chan struct{} // closed when its stdout ends
}

func startRaceFollower(t *testing.T, ctx context.Context, e *raceEnv) *raceFollower {
	t.Helper()
	f := &raceFollower{more: make(chan struct{}, 1), done: make(chan struct{})}
	f.cmd = exec.CommandContext(ctx, "cq", "events", "--follow", "--since", "0")
	f.cmd.Env, f.cmd.Dir, f.cmd.Stderr = e.env, e.dir, &f.errb
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.cmd.Process.Kill(); _ = f.cmd.Wait() })
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev cqEvent
			_ = json.Unmarshal(sc.Bytes(), &ev)
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.last = ev.Seq
			f.mu.Unlock()
			select {
			case f.more <- struct{}{}:
			default:
			}
		}
	}()
	return f
}

// check waits (with a deadline) until the follower has printed the last
// event of log, stops it with SIGINT, and compares what it printed with
// log line for line.
func (f *raceFollower) check(t *testing.T, log string) {
	t.Helper()
	want := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	var lastSeq int64
	var ev cqEvent
	if err := json.Unmarshal([]byte(want[len(want)-1]), &ev); err != nil {
		t.Fatalf("last event %q: %v", want[len(want)-1], err)
	}
	lastSeq = ev.Seq
	deadline := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		caught := f.last >= lastSeq
		f.mu.Unlock()
		if caught {
			break
		}
		select {
		case <-f.more:
		case <-f.done:
			t.Fatalf("cq events --follow ended early; stderr %q", f.errb.String())
		case <-deadline:
			t.Fatalf("cq events --follow did not reach seq %d within 30s", lastSeq)
		}
	}
	if err := f.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-f.done
	err := f.cmd.Wait()
	if code := f.cmd.ProcessState.ExitCode(); code != 0 || f.errb.Len() > 0 {
		t.Errorf("cq events --follow stopped by SIGINT: exit %d (%v), stderr %q; want 0 and nothing", code, err, f.errb.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Join(f.lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("cq events --follow printed %d lines, the final log has %d; they differ (skipped or repeated events)", len(f.lines), len(want))
		for i := 0; i < len(want) || i < len(f.lines); i++ {
			var a, b string
			if i < len(f.lines) {
				a = f.lines[i]
			}
			if i < len(want) {
				b = want[i]
			}
			if a != b {
				t.Errorf("first difference at line %d:\nfollower %s\n   final %s", i+1, a, b)
				break
			}
		}
	}
}

// raceCheckEvents replays the event log: seq strictly increasing; per
// task, task.created into inbox first, then each event's from is the
// previous to and each change is allowed by the task state machine; the last to
// is the task's state; and no --unique key ever has two live tasks.
func raceCheckEvents(t *testing.T, log string, byID map[string]raceTask, uniqueKeys []string) {
	t.Helper()
	state := map[string]string{}
	live := map[string]map[string]bool{} // unique key → live task ids
	for _, k := range uniqueKeys {
		live[k] = map[string]bool{}
	}
	var last int64
	n := 0
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev cqEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		n++
		if ev.Seq <= last {
			t.Errorf("seq %d after %d: not strictly increasing", ev.Seq, last)
		}
		last = ev.Seq
		id := strOf(ev.TaskID)
		if id == "" || ev.RunID != nil {
			continue
		}
		from, to := strOf(ev.From), strOf(ev.To)
		prev, seen := state[id]
		switch {
		case !seen:
			if ev.Kind != "task.created" || ev.From != nil || to != queue.TaskInbox {
				t.Errorf("task %s: first event is %s %q→%q, want task.created → inbox", id, ev.Kind, from, to)
			}
		case from != prev:
			t.Errorf("task %s: event %d %s goes from %q but the task was %q", id, ev.Seq, ev.Kind, from, prev)
		case from != to && !queue.TaskTransitionAllowed(from, to):
			t.Errorf("task %s: event %d %s: %s → %s is not allowed by the task state machine (docs/semantics.md)", id, ev.Seq, ev.Kind, from, to)
		}
		state[id] = to
		if tk, ok := byID[id]; ok && tk.Key != nil {
			if ids, ok := live[*tk.Key]; ok {
				if queue.TaskTerminal(to) {
					delete(ids, id)
				} else {
					ids[id] = true
				}
				if len(ids) > 1 {
					var list []string
					for x := range ids {
						list = append(list, x)
					}
					sort.Strings(list)
					t.Errorf("after event %d, --unique key %s has %d live tasks: %v", ev.Seq, *tk.Key, len(ids), list)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the event log is empty")
	}
	for id, tk := range byID {
		if got, ok := state[id]; !ok || got != tk.State {
			t.Errorf("task %s is %s, but its events end in %q", id, tk.State, got)
		}
	}
}

// TestRaceStartOnANewHome: several processes starting at once on a new
// home create and migrate it safely (docs/operations.md, Home and files).
func TestRaceStartOnANewHome(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 8
	for round := 0; round < 4; round++ {
		for _, args := range [][]string{{"ls"}, {"enqueue", "--", "true"}} {
			home := filepath.Join(t.TempDir(), "new", "home")
			e := newRaceEnv(t, home)
			type proc struct {
				cmd       *exec.Cmd
				out, errb *bytes.Buffer
			}
			var procs []proc
			for i := 0; i < n; i++ {
				cmd, out, errb := e.start(t, ctx, args...)
				procs = append(procs, proc{cmd, out, errb})
			}
			ids := map[string]bool{}
			for _, p := range procs {
				r := e.wait(t, p.cmd, p.out, p.errb, args)
				if r.code != 0 {
					t.Errorf("round %d: on a new home:\n%s", round, r)
				}
				if args[0] == "enqueue" {
					ids[strings.TrimSpace(r.stdout)] = true
				}
			}
			e.checkResults(t)
			if args[0] == "enqueue" {
				ls := e.run(t, ctx, "ls", "-q", "--limit", "0")
				if got := len(strings.Fields(ls.stdout)); got != n || len(ids) != n {
					t.Errorf("round %d: %d distinct ids printed, %d tasks listed; want %d", round, len(ids), got, n)
				}
			}
			if st, err := os.Stat(home); err != nil {
				t.Errorf("home %s: %v", home, err)
			} else if st.Mode().Perm() != 0o700 {
				t.Errorf("home %s has mode %#o, want 0700", home, st.Mode().Perm())
			}
			ents, err := os.ReadDir(home)
			if err != nil {
				t.Fatal(err)
			}
			for _, ent := range ents {
				info, err := ent.Info()
				if err != nil {
					continue // a -wal or -shm removed meanwhile
				}
				if info.Mode().IsRegular() && info.Mode().Perm() != 0o600 {
					t.Errorf("%s has mode %#o, want 0600", ent.Name(), info.Mode().Perm())
				}
			}
			if t.Failed() {
				return
			}
		}
	}
}
