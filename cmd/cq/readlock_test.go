package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// TestReadsBesideALongWrite: with a line in the spool and another process
// holding the store's write lock, commands that only read answer at once
// (without draining) instead of queueing behind the writer; cq wait of
// the spooled id does not call it unknown (exit 4) but drains once the
// lock is free and then waits as usual (124 at its timeout).
func TestReadsBesideALongWrite(t *testing.T) {
	e := opsNewEnv(t)
	e.code(0, "enqueue", "--id", "first", "--", "true")
	conn, err := e.db().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	locked := true
	release := func() {
		if locked {
			locked = false
			if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()
	id := strings.TrimSpace(e.code(0, "enqueue", "--spool", "--", "true"))

	// Far below the 30 s busy timeout a queued read would wait.
	const within = 10 * time.Second
	for _, args := range [][]string{{"ls", "-q"}, {"show", "first"}, {"queue", "ls"}, {"events"}, {"health", "-q"}} {
		start := time.Now()
		out, errs, code := e.run(args...)
		if took := time.Since(start); took > within || (code != 0 && args[0] != "health") || errs != "" {
			t.Errorf("cq %s beside a writer: exit %d in %v, stderr %q", strings.Join(args, " "), code, took.Round(time.Millisecond), errs)
		}
		if args[0] == "ls" && strings.TrimSpace(out) != "first" {
			t.Errorf("cq ls -q beside a writer: %q, want only the stored task", out)
		}
	}

	// cq wait of the spooled id, while the lock is held: once it holds
	// the spool lock for its full drain (after its first try gave up),
	// the writer lets go.
	type result struct {
		code int
		errs string
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		_, errs, code := e.run("wait", id, "--timeout", "1s")
		done <- result{code, errs}
	}()
	l := flock.New(filepath.Join(e.home, "queue.lock"))
	deadline := time.Now().Add(within)
	for locked {
		select {
		case r := <-done:
			t.Fatalf("cq wait %s ended while the lock was held: exit %d, stderr %q; want it to wait for the drain", id, r.code, r.errs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("cq wait never took the spool lock for its drain")
		}
		if ok, _ := l.TryLock(); ok {
			_ = l.Unlock()
		} else if time.Since(start) > readDrainWait+200*time.Millisecond {
			release()
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := <-done
	if r.code != 124 {
		t.Fatalf("cq wait %s (spooled, lock held at the start): exit %d, stderr %q; want 124 (stored once drained, not finished)", id, r.code, r.errs)
	}
	e.code(0, "show", id)

	// The same for cq show: a task spooled while the lock is held is found
	// once the drain can run (the lock is gone here, the drain not skipped,
	// so this checks the common path; the wait above checks the fallback).
	id2 := strings.TrimSpace(e.code(0, "enqueue", "--spool", "--", "true"))
	e.code(0, "show", id2)
	e.code(4, "logs", id2) // no run yet
}
