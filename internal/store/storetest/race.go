package storetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// A race is a concurrency test: racers run work at once against one
// database, then check reads what they left. It runs twice, as subtests:
// "goroutines", racers in this process on several stores opened on the
// database, and "processes", racers in child processes (this test binary
// again, running only that subtest), as cq's commands and workers race.
type race struct {
	setup func(e *env)
	// work is one racer's part; racer numbers are distinct, from 0.
	work func(s store.Store, racer int) error
	// watch, if set, runs in this process while the racers run, until
	// done is closed.
	watch func(s store.Store, done <-chan struct{}) error
	// check reads the outcome; racers are the numbers that ran.
	check func(e *env, racers []int)
}

const (
	// perStore is how many goroutines race on each store (each process).
	perStore = 2
	// raceStores is how many stores race in the goroutine variant, and
	// raceProcs how many processes in the process variant.
	raceStores = 4
	raceProcs  = 3
)

// The environment of a child process: the database, and which stores of
// the race it is (its racers are perStore*id to perStore*id+perStore-1).
const (
	envChildAddr = "CQ_STORETEST_ADDR"
	envChildID   = "CQ_STORETEST_CHILD"
	readyLine    = "storetest: ready"
	goLine       = "go"
)

func runRace(t *testing.T, b Backend, r race) {
	if addr := os.Getenv(envChildAddr); addr != "" {
		// This process is a child: the only test it runs is its race.
		raceChild(t, b, r, addr)
		return
	}
	t.Run("goroutines", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, b)
		if r.setup != nil {
			r.setup(e)
		}
		stores := make([]store.Store, raceStores)
		for i := range stores {
			stores[i] = b.Open(t, e.addr)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, raceStores*perStore)
		var racers []int
		for i, s := range stores {
			for g := range perStore {
				n := perStore*i + g
				racers = append(racers, n)
				wg.Go(func() {
					<-start
					errs[n] = r.work(s, n)
				})
			}
		}
		stopWatch := watch(e, r)
		close(start)
		wg.Wait()
		stopWatch()
		for n, err := range errs {
			if err != nil {
				t.Errorf("racer %d: %v", n, err)
			}
		}
		if !t.Failed() {
			r.check(e, racers)
		}
	})
	t.Run("processes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, b)
		if r.setup != nil {
			r.setup(e)
		}
		var racers []int
		for i := range raceProcs * perStore {
			racers = append(racers, i)
		}
		runChildren(t, e, r, raceProcs)
		if !t.Failed() {
			r.check(e, racers)
		}
	})
}

// watch starts r.watch, if any; the function it returns stops it and
// reports its error.
func watch(e *env, r race) func() {
	if r.watch == nil {
		return func() {}
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- r.watch(e.s, done) }()
	return func() {
		close(done)
		if err := <-errc; err != nil {
			e.t.Errorf("watching the race: %v", err)
		}
	}
}

// raceChild is a child process's part: open the database, say ready, wait
// for the parent's go, and race.
func raceChild(t *testing.T, b Backend, r race, addr string) {
	id, err := strconv.Atoi(os.Getenv(envChildID))
	if err != nil {
		t.Fatalf("$%s: %v", envChildID, err)
	}
	s := b.Open(t, addr)
	fmt.Println(readyLine)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != goLine {
		t.Fatalf("no go from the parent: read %q, %v", line, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, perStore)
	for g := range perStore {
		wg.Go(func() { errs[g] = r.work(s, perStore*id+g) })
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("racer %d: %v", perStore*id+g, err)
		}
	}
}

// child is a child process of a race, and what it printed.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   bytes.Buffer
	ready chan struct{} // closed when it printed readyLine
	done  chan struct{} // closed when its output ended
}

func (c *child) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(c.out.String())
}

// runChildren runs n children of test t, each running t alone (its
// -test.run pattern) with the database's address in its environment;
// they race together once all are ready. Any child's failure fails t.
func runChildren(t *testing.T, e *env, r race, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-5*time.Second).Before(deadline) {
		deadline = d.Add(-5 * time.Second)
	}
	cctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	kids := make([]*child, 0, n)
	defer func() {
		// On any way out, no child outlives the test.
		cancel()
		for _, k := range kids {
			<-k.done
			_ = k.cmd.Wait()
		}
	}()
	for i := range n {
		k := &child{ready: make(chan struct{}), done: make(chan struct{})}
		k.cmd = exec.CommandContext(cctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1")
		k.cmd.Env = append(os.Environ(), envChildAddr+"="+e.addr, envChildID+"="+strconv.Itoa(i))
		k.cmd.Stderr = k
		stdout, err := k.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if k.stdin, err = k.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := k.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, k)
		go func() {
			defer close(k.done)
			sc := bufio.NewScanner(stdout)
			ready := false
			for sc.Scan() {
				if !ready && sc.Text() == readyLine {
					ready = true
					close(k.ready)
					continue
				}
				fmt.Fprintln(k, sc.Text())
			}
		}()
	}
	for i, k := range kids {
		select {
		case <-k.ready:
		case <-k.done:
			t.Fatalf("child %d ended before it was ready:\n%s", i, k.output())
		case <-cctx.Done():
			t.Fatalf("child %d not ready by the deadline:\n%s", i, k.output())
		}
	}
	stopWatch := watch(e, r)
	for _, k := range kids {
		_, _ = io.WriteString(k.stdin, goLine+"\n")
		_ = k.stdin.Close()
	}
	for i, k := range kids {
		select {
		case <-k.done:
		case <-cctx.Done():
			t.Errorf("child %d did not end by the deadline:\n%s", i, k.output())
			stopWatch()
			return
		}
	}
	stopWatch()
	for i, k := range kids {
		if err := k.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v:\n%s", i, err, k.output())
		}
	}
	kids = nil
}

// runPattern is the -test.run pattern that selects the test named name
// and nothing else: each of its parts anchored.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
