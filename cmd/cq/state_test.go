package main

// cq state: its JSON written as the tasks stream equals the whole object
// written at once; and a consumer that rebuilds its view from one cq
// state and then cq events --since SEQ --follow, while many processes
// change the store, ends with exactly the store's final snapshot.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// TestStateStreamedJSON: writeState, which writes the tasks as the store
// yields them, prints exactly what writeJSON (-o json) and writeJSONLine
// (-o jsonl) print for the whole queue.State.
func TestStateStreamedJSON(t *testing.T) {
	str := func(s string) *string { return &s }
	task := func(id string) *queue.Task {
		return &queue.Task{ID: id, State: "todo", Queue: "q", Priority: "P2", After: []string{"x<y>&z"}, CreatedAt: "t",
			UpdatedAt: "t", Cmd: []string{"echo", "a\tb"}, Env: map[string]string{"K": "V"}, Payload: json.RawMessage(`{"a":[1,2]}`),
			Reason: str("why")}
	}
	states := []*queue.State{
		{Seq: 0, Tasks: []*queue.Task{}, Queues: map[string]queue.Queue{}, Workers: []queue.Worker{}},
		{Seq: 7, Tasks: []*queue.Task{task("a")}, Queues: map[string]queue.Queue{"q": {Name: "q", Timeout: str("1m")}},
			Workers: []queue.Worker{{ID: "w", Queues: []string{}}}},
		{Seq: 1 << 40, Tasks: []*queue.Task{task("a"), task("b"), task("c")},
			Queues:  map[string]queue.Queue{"b": {Name: "b"}, "a": {Name: "a", Paused: true}},
			Workers: []queue.Worker{{ID: "w1", Queues: []string{"a"}}, {ID: "w2", Queues: []string{}}}},
	}
	for i, st := range states {
		for _, line := range []bool{false, true} {
			var want, got bytes.Buffer
			write := writeJSON
			if line {
				write = writeJSONLine
			}
			if err := write(&want, st); err != nil {
				t.Fatal(err)
			}
			err := writeState(&got, line, func(head func(*queue.State) error, each func(*queue.Task) error) error {
				h := *st
				h.Tasks = nil
				if err := head(&h); err != nil {
					return err
				}
				for _, tk := range st.Tasks {
					if err := each(tk); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("state %d (line %v): streamed\n%s\nwant\n%s", i, line, got.String(), want.String())
			}
		}
	}
}

// stateSnapshot is the part of cq state's JSON the rebuild compares.
type stateSnapshot struct {
	Seq   int64 `json:"seq"`
	Tasks []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"tasks"`
	Queues  map[string]json.RawMessage `json:"queues"`
	Workers []json.RawMessage          `json:"workers"`
}

// view is the snapshot's tasks: id → state.
func (s stateSnapshot) view() map[string]string {
	v := make(map[string]string, len(s.Tasks))
	for _, t := range s.Tasks {
		v[t.ID] = t.State
	}
	return v
}

// stateAll runs cq state --all and decodes it.
func stateAll(t *testing.T, e *cqEnv) stateSnapshot {
	t.Helper()
	out, errs, code := e.run("state", "--all")
	if code != 0 || errs != "" {
		t.Fatalf("cq state --all: exit %d, stderr %q", code, errs)
	}
	var s stateSnapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("cq state --all: %v\n%s", err, out)
	}
	if s.Queues == nil || s.Workers == nil {
		t.Fatalf("cq state --all lacks queues or workers:\n%s", out)
	}
	return s
}

// stateFollower is a cq events --since SEQ --follow process whose lines
// the test reads as they come.
type stateFollower struct {
	cmd  *exec.Cmd
	errb syncBuffer
	mu   sync.Mutex
	evs  []cqEvent
	bad  []string // lines that are not events
	more chan struct{}
	done chan struct{}
}

func startStateFollower(t *testing.T, e *cqEnv, since int64) *stateFollower {
	t.Helper()
	f := &stateFollower{more: make(chan struct{}, 1), done: make(chan struct{})}
	f.cmd = e.command(context.Background(), "", "events", "--since", fmt.Sprint(since), "--follow")
	f.cmd.Stderr = &f.errb
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
			err := json.Unmarshal(sc.Bytes(), &ev)
			f.mu.Lock()
			if err != nil {
				f.bad = append(f.bad, sc.Text())
			} else {
				f.evs = append(f.evs, ev)
			}
			f.mu.Unlock()
			select {
			case f.more <- struct{}{}:
			default:
			}
		}
	}()
	return f
}

// upTo waits (with a deadline) until the follower has printed an event of
// seq at least seq, and returns every event it printed so far.
func (f *stateFollower) upTo(t *testing.T, seq int64) []cqEvent {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.evs)
		caught := seq == 0 || (n > 0 && f.evs[n-1].Seq >= seq)
		evs := append([]cqEvent(nil), f.evs...)
		bad := f.bad
		f.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("cq events --follow printed lines that are no events: %q", bad)
		}
		if caught {
			return evs
		}
		select {
		case <-f.more:
		case <-f.done:
			t.Fatalf("cq events --follow ended early; stderr %q", f.errb.String())
		case <-deadline:
			last := int64(-1)
			if n > 0 {
				last = evs[n-1].Seq
			}
			t.Fatalf("cq events --follow did not reach seq %d within 60s (last %d)", seq, last)
		}
	}
}

// rebuild applies the events of seq up to upto to a copy of base (a
// snapshot's view): each task event's to is its task's new state
// (task.created's is inbox); other events change no task's state.
func rebuild(base map[string]string, evs []cqEvent, upto int64) map[string]string {
	v := make(map[string]string, len(base))
	for id, s := range base {
		v[id] = s
	}
	for _, ev := range evs {
		if ev.Seq > upto {
			break
		}
		if strings.HasPrefix(ev.Kind, "task.") && ev.TaskID != nil && ev.To != nil {
			v[*ev.TaskID] = *ev.To
		}
	}
	return v
}

// diffViews describes how got differs from want, "" when equal.
func diffViews(got, want map[string]string) string {
	var d []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			d = append(d, fmt.Sprintf("%s: missing from the rebuilt view, %s in the snapshot", id, w))
		} else if g != w {
			d = append(d, fmt.Sprintf("%s: %s rebuilt, %s in the snapshot", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			d = append(d, fmt.Sprintf("%s: %s rebuilt, not in the snapshot", id, g))
		}
	}
	sort.Strings(d)
	if len(d) > 20 {
		d = append(d[:20], fmt.Sprintf("… %d more", len(d)-20))
	}
	return strings.Join(d, "\n")
}

// TestStateFollowRebuild: a reader takes cq state --all and follows cq
// events --since its seq while producers enqueue, operators cancel,
// retry, hold and release, and a worker runs short tasks, each a process
// of its own. Every snapshot taken meanwhile, and the final one, equals
// the first snapshot with the events up to its seq applied: every task,
// every state. The events come once each, in strictly increasing seq,
// from just after the first snapshot's seq.
func TestStateFollowRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hundreds of processes")
	}
	t.Parallel()
	e := newBackendEnv(t, 60*time.Second, false)
	// Enough tasks that a snapshot's listing goes past one chunk (500)
	// of the domain's, which reads each chunk's dependencies meanwhile.
	var batch strings.Builder
	for i := 0; i < 520; i++ {
		fmt.Fprintf(&batch, `{"id":"held-%03d","queue":"parked","hold":true,"cmd":["true"]}`+"\n", i)
	}
	if _, errs, code := e.runIn(batch.String(), "enqueue", "--batch"); code != 0 {
		t.Fatalf("enqueue --batch: exit %d, %s", code, errs)
	}
	e.ok("queue", "set", "work", "--retries", "1", "--backoff", "100ms")

	worker := e.command(context.Background(), "", "worker", "--concurrency", "4", "--queue", "work", "--queue", "parked", "--grace", "1s")
	var workerErr syncBuffer
	worker.Stderr = &workerErr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })

	first := stateAll(t, e)
	if len(first.Tasks) != 520 {
		t.Fatalf("first snapshot has %d tasks, want the 520 of the batch", len(first.Tasks))
	}
	follower := startStateFollower(t, e, first.Seq)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var writers sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// Producers: tasks that succeed, fail (retried once), depend on
	// another, share a key lane or wait on a hold.
	const producers, perProducer = 3, 40
	producersDone := make(chan struct{})
	var prodWG sync.WaitGroup
	for p := 0; p < producers; p++ {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			var mine []string
			for j := 0; j < perProducer && ctx.Err() == nil; j++ {
				args := []string{"enqueue", "--queue", "work"}
				switch j % 5 {
				case 1:
					args = append(args, "--key", fmt.Sprintf("lane-%d", j%2))
				case 2:
					if len(mine) > 0 {
						args = append(args, "--after", mine[len(mine)-1])
					}
				case 3:
					args = append(args, "--hold")
				}
				cmd := "true"
				if j%3 == 0 {
					cmd = "false"
				}
				out, errs, code := e.run(append(args, "--", cmd)...)
				if code != 0 {
					fail("cq %s: exit %d, %s", strings.Join(args, " "), code, errs)
					continue
				}
				mine = append(mine, strings.TrimSpace(out))
			}
		}()
	}
	go func() { prodWG.Wait(); close(producersDone) }()
	// Operators: each round picks tasks from a listing and acts on them;
	// a lost race or an illegal transition (3) is a normal outcome.
	ops := [][]string{{"cancel"}, {"retry"}, {"hold"}, {"release"}, {"release"}, {"cancel"}}
	for o := 0; o < 3; o++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(o), 7))
			for round := 0; ctx.Err() == nil; round++ {
				select {
				case <-producersDone:
					if round >= 5 {
						return
					}
				default:
				}
				out, _, code := e.run("ls", "-q", "--limit", "0")
				ids := strings.Fields(out)
				if code != 0 || len(ids) == 0 {
					continue
				}
				for k := 0; k < 4; k++ {
					op := append([]string(nil), ops[rng.IntN(len(ops))]...)
					op = append(op, ids[rng.IntN(len(ids))])
					if _, errs, code := e.run(op...); code != 0 && code != 3 {
						fail("cq %s: exit %d, %s", strings.Join(op, " "), code, errs)
					}
				}
			}
		}()
	}
	// Snapshots taken, one after another, while everything runs.
	var mids []stateSnapshot
	writers.Add(1)
	go func() {
		defer writers.Done()
		for ctx.Err() == nil {
			select {
			case <-producersDone:
				return
			default:
			}
			out, errs, code := e.run("state", "--all")
			var s stateSnapshot
			if code != 0 || errs != "" || json.Unmarshal([]byte(out), &s) != nil {
				fail("cq state --all while writers run: exit %d, stderr %q", code, errs)
				return
			}
			mu.Lock()
			mids = append(mids, s)
			mu.Unlock()
		}
	}()
	prodWG.Wait()
	writers.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the writers did not finish in time")
	}
	for _, f := range failures {
		t.Error(f)
	}

	// The worker may still be running tasks: the final snapshot is of
	// whatever seq it reads, and the view is rebuilt up to that seq.
	final := stateAll(t, e)
	evs := follower.upTo(t, final.Seq)

	prev := first.Seq
	for _, ev := range evs {
		if ev.Seq <= prev {
			t.Fatalf("event seq %d follows %d: repeated or out of order (%v)", ev.Seq, prev, ev)
		}
		prev = ev.Seq
	}
	base := first.view()
	for i, s := range append(mids, final) {
		if s.Seq < first.Seq {
			t.Errorf("snapshot %d has seq %d, before the first snapshot's %d", i, s.Seq, first.Seq)
			continue
		}
		if d := diffViews(rebuild(base, evs, s.Seq), s.view()); d != "" {
			t.Errorf("snapshot %d (seq %d, %d tasks) differs from the first snapshot (seq %d) plus the events up to its seq:\n%s",
				i, s.Seq, len(s.Tasks), first.Seq, d)
		}
	}
	n := 0
	for _, ev := range evs {
		if ev.Seq <= final.Seq {
			n++
		}
	}
	t.Logf("%d tasks; %d events between the first snapshot (seq %d) and the last (seq %d); %d snapshots meanwhile",
		len(final.Tasks), n, first.Seq, final.Seq, len(mids))
	if n < 200 {
		t.Errorf("only %d events between the snapshots: the writers did too little for the test to mean much", n)
	}
	if t.Failed() {
		log := strings.Split(strings.TrimSpace(workerErr.String()), "\n")
		t.Logf("worker log, its last lines:\n%s", strings.Join(log[max(0, len(log)-30):], "\n"))
	}
}
