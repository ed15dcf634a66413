package sqlite

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ckptEveryCommits is how many commits of a process with background
// checkpoints make a checkpoint due: a worker with 64 runs in flight
// commits about 50 WAL pages each time, one with 4 about 15, so a
// checkpoint copies some hundreds to a few thousand pages. Every 16
// commits copied more pages in all (a page changed in several commits
// is copied once per checkpoint); every 128 left more for the backstop.
const ckptEveryCommits = 48

// BackgroundCheckpoints moves this process's WAL checkpoints off its
// write path, for a long-lived writer (a worker): every
// ckptEveryCommits commits, a goroutine checkpoints on a connection of
// its own (PASSIVE: it never waits for a lock, and commits go on while
// it copies pages and syncs the files). SQLite's automatic checkpoint,
// which runs inside the COMMIT that crosses autoCheckpointPages and held
// that commit for the whole copy and its two fsyncs (tens of ms on this
// disk), stays as the backstop: with the WAL kept backfilled it finds
// little or nothing left to copy. stop ends the goroutine.
func (d *DB) BackgroundCheckpoints(ctx context.Context) (stop func(), err error) {
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return nil, err
	}
	due := make(chan struct{}, 1)
	quit, finished := make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	d.ckpt = due
	d.mu.Unlock()
	go func() {
		defer close(finished)
		for {
			select {
			case <-quit:
				return
			case <-due:
				_, _ = c.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(PASSIVE)")
			}
		}
	}()
	return func() {
		d.mu.Lock()
		d.ckpt = nil
		d.mu.Unlock()
		close(quit)
		<-finished
		_ = c.Close()
	}, nil
}

// autoCheckpointPages is the WAL size, in pages, from which a commit
// checkpoints it (SQLite's automatic checkpoint, run by the committing
// connection). A worker commits about a dozen pages per task, so at
// SQLite's 1000 it checkpointed every 70-odd tasks, and each checkpoint
// syncs the WAL and the database file on the worker's loop: on disk,
// cq's end-to-end rate followed the count (on tmpfs it matched the
// floor's). 4000 (a WAL of 16 MiB at most between checkpoints, beside the
// 64 MiB goal) made the worker faster end to end (docs/performance.md).
// A short command's TrimWAL still keeps
// the WAL at 1 MiB when no worker holds the store.
const autoCheckpointPages = 4000

// trimWALBytes is the WAL size from which TrimWAL checkpoints and
// truncates the WAL: about 250 frames, two dozen enqueues.
const trimWALBytes = 1 << 20

// TrimWAL checkpoints the WAL into the database file and truncates it,
// when it has grown past trimWALBytes, no long-lived process holds the
// store (see Hold) and no other connection is in the way (it never waits
// for one: busy means it is left for later). For a
// short-lived command on its way out: the first process to open a store
// that no other process holds reads the whole WAL to rebuild its index,
// so without this each short command paid for every frame written since
// the last restart of the WAL (docs/performance.md). The WAL's file stays, so the next process does not create it.
func (d *DB) TrimWAL(ctx context.Context) {
	fi, err := os.Stat(d.Path + "-wal")
	if err != nil || fi.Size() < trimWALBytes || held(d.Path) {
		return
	}
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return
	}
	_, _ = c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	_, _ = c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout/time.Millisecond))
}

// ChangeWatch returns changed, which reports whether another connection
// (any process's) has committed to the store since its previous call, by
// PRAGMA data_version on a connection of its own; its first call reports
// true. stop gives the connection back. For pollers (cq wait) that need
// not read anything while the store stands still.
func (d *DB) ChangeWatch(ctx context.Context) (changed func() (bool, error), stop func(), err error) {
	c, err := d.SQL.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	last := int64(-1)
	changed = func() (bool, error) {
		var v int64
		if err := c.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			return true, err
		}
		ch := v != last
		last = v
		return ch, nil
	}
	return changed, func() { _ = c.Close() }, nil
}
