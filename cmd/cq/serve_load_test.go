package main

// cq serve under load (docs/serve-streams.md, "Many clients"): many
// Server-Sent Events clients and a steady rate of POST /tasks at once, on
// loopback. What is checked is what must hold whatever the machine:
// nothing lost, every stream complete and in order, the server's memory
// within a bound, and all of it within a deadline. The rates reached are
// logged (go test -v); make bench reports them.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The load: loadClients streams, loadRate POSTs a second for loadFor.
const (
	loadClients = 200
	loadRate    = 1000
	loadFor     = 10 * time.Second
	// loadSenders POST side by side, as webhook senders do.
	loadSenders = 32
	// loadLate streams join after the load from where it began: far
	// behind the server's window of recent events, they read the store
	// first.
	loadLate = 4
	// loadPeakRSS bounds the server's peak resident memory. The server
	// keeps a fixed window of recent events whatever the number of
	// clients; the race detector multiplies what a Go program uses.
	loadPeakRSS     = 256 << 20
	loadPeakRSSRace = 1 << 30
)

// sseTally is what one stream received: how many events, their last seq,
// and a hash of their id and data lines in order, so that streams are
// compared without keeping every event of every stream.
type sseTally struct {
	n    atomic.Int64
	last atomic.Int64
	// ended: the stream ended early (err says why; read it after the
	// reader returned).
	ended atomic.Bool
	sum   uint64
	err   error
}

// readSSE reads the stream of GET /events?since=since into t until ctx
// ends or the stream does. A seq that is not above the one before is an
// error.
func readSSE(ctx context.Context, client *http.Client, base string, since int64, t *sseTally, connected func()) {
	defer func() {
		if ctx.Err() == nil {
			t.ended.Store(true)
		}
	}()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/events?since="+strconv.FormatInt(since, 10), nil)
	if err != nil {
		t.err = err
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			t.err = err
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.err = fmt.Errorf("GET /events: status %d", resp.StatusCode)
		return
	}
	if connected != nil {
		connected()
	}
	h := fnv.New64a()
	t.last.Store(since)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var id int64 = -1
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, err = strconv.ParseInt(line[4:], 10, 64)
			if err != nil {
				t.err = fmt.Errorf("bad id line %q", line)
				return
			}
		case strings.HasPrefix(line, "data: "):
			if id <= t.last.Load() {
				t.err = fmt.Errorf("event %d after %d", id, t.last.Load())
				return
			}
			fmt.Fprintf(h, "%d %s\n", id, line[6:])
			t.sum = h.Sum64()
			t.last.Store(id)
			t.n.Add(1)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		t.err = err
	}
}

func TestServeLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s load of 200 streams and 10000 requests")
	}
	e := newBackendEnv(t, 5*time.Minute, false)
	srv := startGateway(t, e)
	start := seqOfLast(e)

	tr := &http.Transport{MaxIdleConnsPerHost: loadSenders + loadClients + loadLate}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// The streams, connected before the load begins.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var streams sync.WaitGroup
	var connected sync.WaitGroup
	tallies := make([]*sseTally, loadClients)
	for i := range tallies {
		tallies[i] = &sseTally{}
		streams.Add(1)
		connected.Add(1)
		go func() {
			defer streams.Done()
			var once sync.Once
			readSSE(ctx, client, srv.base, start, tallies[i], func() { once.Do(connected.Done) })
			once.Do(connected.Done)
		}()
	}
	waitGroupFor(t, &connected, time.Minute, "the streams to connect")

	// The POSTs: ids offered at loadRate, sent by loadSenders; a sender
	// whose request fails sends it again, as a webhook sender does (the
	// task id makes it once).
	total := loadRate * int(loadFor/time.Second)
	ids := make(chan int, total)
	var (
		sent     atomic.Int64
		mu       sync.Mutex
		failures []string
		lat      []time.Duration
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, a...))
		}
		mu.Unlock()
	}
	began := time.Now()
	go func() {
		defer close(ids)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < total; {
			<-tick.C
			due := min(total, int(time.Since(began)*loadRate/time.Second))
			for ; i < due; i++ {
				ids <- i
			}
		}
	}()
	var senders sync.WaitGroup
	for range loadSenders {
		senders.Add(1)
		go func() {
			defer senders.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for i := range ids {
				body := fmt.Sprintf(`{"id":"load-%05d","queue":"load","cmd":["echo","%d"]}`, i, i)
				for try := 0; ; try++ {
					t0 := time.Now()
					status, err := postOnce(client, srv.base+"/tasks", body)
					if err == nil && (status == http.StatusCreated || (try > 0 && status == http.StatusOK)) {
						mine = append(mine, time.Since(t0))
						sent.Add(1)
						break
					}
					if err == nil || try == 3 {
						fail("POST load-%05d (try %d): status %d, %v", i, try+1, status, err)
						break
					}
				}
			}
		}()
	}
	waitGroupFor(t, &senders, 10*loadFor, "the POSTs")
	took := time.Since(began)
	for _, f := range failures {
		t.Error(f)
	}
	if int(sent.Load()) != total {
		t.Fatalf("%d of %d POSTs succeeded", sent.Load(), total)
	}

	// Nothing lost: every stream has exactly the events cq events prints,
	// in order, and every task is stored.
	want := eventLines(e, start)
	wantLast := seqOfLine(t, want[len(want)-1])
	h := fnv.New64a()
	for _, l := range want {
		fmt.Fprintf(h, "%d %s\n", seqOfLine(t, l), l)
	}
	wantSum := h.Sum64()
	eventually(t, time.Minute, "every stream to receive the last event", func() (bool, string) {
		for i, tl := range tallies {
			if tl.last.Load() < wantLast && !tl.ended.Load() {
				return false, fmt.Sprintf("stream %d at seq %d of %d", i, tl.last.Load(), wantLast)
			}
		}
		return true, ""
	})
	// At most: it includes reading the log with cq events.
	lag := time.Since(began) - took
	if out := e.ok("ls", "-q", "--limit", "0", "--queue", "load"); strings.Count(out, "\n") != total {
		t.Fatalf("cq ls lists %d tasks of queue load, want %d", strings.Count(out, "\n"), total)
	}

	// Late streams, from where the load began: behind the window.
	late := make([]*sseTally, loadLate)
	lateCtx, stopLate := context.WithCancel(context.Background())
	defer stopLate()
	var lateDone sync.WaitGroup
	for i := range late {
		late[i] = &sseTally{}
		lateDone.Add(1)
		go func() { defer lateDone.Done(); readSSE(lateCtx, client, srv.base, start, late[i], nil) }()
	}
	eventually(t, time.Minute, "the late streams to receive the last event", func() (bool, string) {
		for i, tl := range late {
			if tl.last.Load() < wantLast && !tl.ended.Load() {
				return false, fmt.Sprintf("late stream %d at seq %d of %d", i, tl.last.Load(), wantLast)
			}
		}
		return true, ""
	})
	rss := peakRSS(t, srv.cmd.Process.Pid)
	stop()
	stopLate()
	streams.Wait()
	lateDone.Wait()
	for i, tl := range append(tallies, late...) {
		if tl.err != nil {
			t.Errorf("stream %d: %v", i, tl.err)
			continue
		}
		if got := tl.n.Load(); got != int64(len(want)) || tl.sum != wantSum {
			t.Errorf("stream %d received %d events (hash %x), cq events prints %d (hash %x)", i, got, tl.sum, len(want), wantSum)
		}
	}

	bound := int64(loadPeakRSS)
	if raceEnabled {
		bound = loadPeakRSSRace
	}
	if rss > bound {
		t.Errorf("cq serve's peak resident memory %d MiB, over %d MiB", rss>>20, bound>>20)
	}
	slices.Sort(lat)
	t.Logf("%d POSTs in %v (%.0f/s offered %d/s), latency p50 %v p99 %v; %d streams of %d events each, all streams had the last event within %v of the last POST; peak RSS %d MiB",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), loadRate,
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond),
		loadClients+loadLate, len(want), lag.Round(time.Millisecond), rss>>20)
}

// postOnce sends one POST and reads its answer.
func postOnce(client *http.Client, url, body string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// seqOfLast is the seq of the newest event of e's store (0 when none).
func seqOfLast(e *cqEnv) int64 {
	lines := eventLines(e, 0)
	if len(lines) == 0 {
		return 0
	}
	return seqOfLine(e.t, lines[len(lines)-1])
}

// peakRSS is the peak resident memory of process pid (Linux's VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("cannot read the server's memory: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// waitGroupFor waits for wg, failing the test after d.
func waitGroupFor(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("waited %v for %s", d, what)
	}
}

// TestServeGroupCommit: POSTs that arrive together are stored in one
// transaction, yet each is answered as if stored alone: a sender's
// concurrent retries of one id make one task (one 201, the rest 200), a
// conflicting spec fails only its own request (409 naming the holder),
// and a bad --after only its own (404).
func TestServeGroupCommit(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, 2*time.Minute, false)
	srv := startGateway(t, e)
	e.ok("enqueue", "--id", "held", "--queue", "g", "--", "echo", "held")
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	const rounds, same, others = 5, 16, 16
	for round := range rounds {
		type answer struct {
			kind   string
			status int
			err    error
		}
		answers := make(chan answer, same+others+2)
		var wg sync.WaitGroup
		post := func(kind, body string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := postOnce(client, srv.base+"/tasks", body)
				answers <- answer{kind, st, err}
			}()
		}
		for range same {
			post("same", fmt.Sprintf(`{"id":"dup-%d","queue":"g","cmd":["echo","dup"]}`, round))
		}
		for i := range others {
			post("other", fmt.Sprintf(`{"id":"other-%d-%d","queue":"g","cmd":["echo","%d"]}`, round, i, i))
		}
		post("conflict", `{"id":"held","queue":"g","cmd":["echo","not held"]}`)
		post("after", fmt.Sprintf(`{"id":"orphan-%d","queue":"g","cmd":["true"],"after":["no-such-task"]}`, round))
		wg.Wait()
		close(answers)
		counts := map[string]map[int]int{}
		for a := range answers {
			if a.err != nil {
				t.Fatalf("round %d: POST (%s): %v", round, a.kind, a.err)
			}
			if counts[a.kind] == nil {
				counts[a.kind] = map[int]int{}
			}
			counts[a.kind][a.status]++
		}
		want := map[string]map[int]int{
			"same":     {http.StatusCreated: 1, http.StatusOK: same - 1},
			"other":    {http.StatusCreated: others},
			"conflict": {http.StatusConflict: 1},
			"after":    {http.StatusNotFound: 1},
		}
		if !reflect.DeepEqual(counts, want) {
			t.Fatalf("round %d: statuses by kind %v, want %v", round, counts, want)
		}
	}
	// One task per id, and the held task unchanged.
	out := e.ok("ls", "-q", "--limit", "0", "--queue", "g")
	if n := strings.Count(out, "\n"); n != 1+rounds*(1+others) {
		t.Fatalf("queue g holds %d tasks, want %d:\n%s", n, 1+rounds*(1+others), out)
	}
	var held struct {
		Cmd []string `json:"cmd"`
	}
	if err := json.Unmarshal([]byte(e.ok("show", "held", "-o", "json")), &held); err != nil || !slices.Equal(held.Cmd, []string{"echo", "held"}) {
		t.Fatalf("the held task changed: %v %v", held.Cmd, err)
	}
}

// TestEnqueueSameIDRace: processes enqueueing one id at once (a sender's
// retries, several hosts' cron) make one task, every one of them told
// success; processes enqueueing different specs under one --unique key
// at once make one task, the others refused with the holder. On
// PostgreSQL the look before the insert does not hold a lock: the loser's
// insert fails and its transaction is run again (internal/store/postgres).
func TestEnqueueSameIDRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hundred processes")
	}
	t.Parallel()
	e := newBackendEnv(t, 2*time.Minute, false)
	const rounds, procs = 4, 8
	for round := range rounds {
		codes := make(chan string, 2*procs)
		var wg sync.WaitGroup
		for i := range procs {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, errs, code := e.run("enqueue", "--id", fmt.Sprintf("same-%d", round), "--queue", "race", "--", "echo", "same")
				codes <- fmt.Sprintf("same %d %s", code, strings.TrimSpace(errs))
			}()
			go func() {
				defer wg.Done()
				_, errs, code := e.run("enqueue", "--key", fmt.Sprintf("k%d", round), "--unique", "--queue", "race", "--", "echo", strconv.Itoa(i))
				if code == 3 {
					errs = "" // refused: the key is held, as it should be
				}
				codes <- fmt.Sprintf("unique %d %s", code, strings.TrimSpace(errs))
			}()
		}
		wg.Wait()
		close(codes)
		got := map[string]int{}
		for c := range codes {
			got[c]++
		}
		want := map[string]int{"same 0 ": procs, "unique 0 ": 1, "unique 3 ": procs - 1}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: outcomes %v, want %v", round, got, want)
		}
	}
	if out := e.ok("ls", "-q", "--limit", "0", "--queue", "race"); strings.Count(out, "\n") != 2*rounds {
		t.Fatalf("queue race holds %d tasks, want %d", strings.Count(out, "\n"), 2*rounds)
	}
}
