package postgres

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake-ups. A transaction that writes events notifies the store's channel
// (pg_notify, sent by the server as it commits). A listener holds one
// connection of its own that LISTENs, and passes each notification on;
// when its connection is lost it reconnects with a backoff and passes one
// wake-up on as it is back (a catch-up: notifications sent meanwhile are
// lost). Poolers in transaction mode break LISTEN, so the callers keep a
// poll (listenPoll) whatever happens here.

// listenPing is how long a listener waits for a notification before it
// checks its connection.
const listenPing = 3 * time.Second

// listen starts a listener on d's channel that sends to wake (without
// blocking: a wake-up pending is enough) until stop.
func (d *DB) listen(ctx context.Context, wake chan<- struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	send := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	wg.Go(func() {
		backoff := 100 * time.Millisecond
		for first := true; ctx.Err() == nil; first = false {
			if !first {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff/2 + rand.N(backoff)):
				}
				backoff = min(2*backoff, 5*time.Second)
			}
			c, err := pgx.ConnectConfig(ctx, d.Pool.Config().ConnConfig)
			if err != nil {
				continue
			}
			if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel()}.Sanitize()); err != nil {
				_ = c.Close(context.Background())
				continue
			}
			backoff = 100 * time.Millisecond
			if !first {
				send() // catch up on what was missed while away
			}
			for ctx.Err() == nil {
				wctx, wcancel := context.WithTimeout(ctx, listenPing)
				_, err := c.WaitForNotification(wctx)
				wcancel()
				if err == nil {
					send()
					continue
				}
				if ctx.Err() != nil {
					break
				}
				pctx, pcancel := context.WithTimeout(ctx, listenPing)
				err = c.Ping(pctx)
				pcancel()
				if err != nil {
					break
				}
			}
			_ = c.Close(context.Background())
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// Wakeups passes on the store's notifications (see listen).
func (b *backend) Wakeups(ctx context.Context) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	return wake, b.listen(ctx, wake)
}

// listenPoll is how often a follower looks at the store with no
// notification (the fallback of SPEC's wake-ups), jittered.
const listenPoll = 1500 * time.Millisecond

// ChangeWatch reports a change when a notification came since the last
// call, and otherwise, every listenPoll or so, when the last event's seq
// moved: every change a follower waits for writes an event.
func (b *backend) ChangeWatch(ctx context.Context) (func() (bool, error), func(), error) {
	wake := make(chan struct{}, 1)
	stop := b.listen(ctx, wake)
	last := int64(-1)
	next := time.Time{}
	changed := func() (bool, error) {
		select {
		case <-wake:
		default:
			if time.Now().Before(next) {
				return false, nil
			}
		}
		next = time.Now().Add(listenPoll/2 + rand.N(listenPoll))
		var v int64
		if err := b.Pool.QueryRow(ctx, `SELECT last FROM event_seq`).Scan(&v); err != nil {
			return true, b.Explain(err)
		}
		ch := v != last
		last = v
		return ch, nil
	}
	return changed, stop, nil
}

// Clock is the server's clock, as read through this process's monotonic
// clock since a reading of the server's (see serverClock).
func (b *backend) Clock() func() time.Time { return b.clock.now }

// serverClock follows the database server's clock: it reads the server's
// time once, notes the round trip's middle on the local monotonic clock,
// and from then on adds the monotonic time elapsed. A step of the local
// wall clock changes nothing; the server's is read again every
// clockRefresh, in the background, to follow its drift.
type serverClock struct {
	d  *DB
	mu sync.Mutex
	// at is the server's time at the local instant local (monotonic).
	at, local time.Time
	// reading: a refresh is under way.
	reading bool
}

// clockRefresh is how often the server's clock is read again.
const clockRefresh = time.Minute

// read reads the server's clock now; it keeps the old reading on error.
func (c *serverClock) read(ctx context.Context) error {
	start := time.Now()
	var at time.Time
	if err := c.d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		return err
	}
	mid := start.Add(time.Since(start) / 2)
	c.mu.Lock()
	c.at, c.local = at.UTC(), mid
	c.mu.Unlock()
	return nil
}

func (c *serverClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local.IsZero() {
		// Never read (the server did not answer at open): the host's
		// clock until it does.
		c.refresh()
		return time.Now().UTC()
	}
	if time.Since(c.local) > clockRefresh {
		c.refresh()
	}
	return c.at.Add(time.Since(c.local))
}

// refresh reads the server's clock in the background, one read at a
// time. Called under mu.
func (c *serverClock) refresh() {
	if c.reading {
		return
	}
	c.reading = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.read(ctx)
		c.mu.Lock()
		c.reading = false
		c.mu.Unlock()
	}()
}

// Exclusive takes a session advisory lock named for the schema and name
// on a connection of its own, held until release (or until the session
// ends: a process that dies frees it).
func (b *backend) Exclusive(ctx context.Context, name string) (func(), bool, error) {
	c, err := b.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, b.Explain(err)
	}
	key := "cq:" + b.Schema + ":exclusive:" + name
	var ok bool
	if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
		c.Release()
		return nil, false, b.Explain(err)
	}
	if !ok {
		c.Release()
		return nil, false, nil
	}
	return func() {
		_, err := c.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key)
		if err != nil {
			// The lock goes with the session: close it rather than give
			// a connection holding it back to the pool.
			_ = c.Hijack().Close(context.Background())
			return
		}
		c.Release()
	}, true, nil
}
