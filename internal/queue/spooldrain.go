package queue

import (
	"context"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/spool"
	"github.com/cq-dev/cq/internal/store"
)

// SpoolLine validates one spool line and returns its normalised spec. A
// spool line must carry its id.
func SpoolLine(line []byte) (Spec, error) {
	sp, err := ParseSpecJSON(line)
	if err != nil {
		return sp, err
	}
	if sp.ID == "" {
		return sp, invalidf("spool line has no id")
	}
	return sp.Normalize()
}

// DrainSpool moves the spool at home into the store: every line is created
// and enqueued as by cq enqueue, in one transaction; each line is stored
// or rejected on its own (a savepoint per line).
func (s *Store) DrainSpool(ctx context.Context, home string) (int, error) {
	return spool.Drain(home, s.Now, s.storeSpooled(ctx, 0))
}

// DrainSpoolWithin is DrainSpool for a command that only reads: it waits
// at most wait for the spool lock and at most wait again for the store's
// write lock, and reports false, having drained nothing, when either was
// held longer (the lines stay in the spool for the next drain): a read
// then answers at once instead of queueing behind a long write.
func (s *Store) DrainSpoolWithin(ctx context.Context, home string, wait time.Duration) (int, bool, error) {
	n, ok, err := spool.DrainWithin(home, s.Now, wait, s.storeSpooled(ctx, wait))
	if errors.Is(err, store.ErrBusy) {
		return 0, false, nil
	}
	return n, ok, err
}

// storeSpooled stores spooled lines in one transaction; a wait above 0
// bounds its wait for the write lock (store.ErrBusy past it).
func (s *Store) storeSpooled(ctx context.Context, wait time.Duration) func(lines [][]byte) ([]spool.Reject, error) {
	return func(lines [][]byte) ([]spool.Reject, error) {
		var rejects []spool.Reject
		body := func(tx store.Tx) error {
			now := s.now()
			rejects = rejects[:0]
			c := newCreator(tx, now)
			for _, line := range lines {
				sp, err := SpoolLine(line)
				if err == nil {
					err = createSaved(ctx, c, sp)
				}
				var bad *Error
				if errors.As(err, &bad) {
					rejects = append(rejects, spool.Reject{Line: line, Err: bad.Error()})
				} else if err != nil {
					return err
				}
			}
			return nil
		}
		var err error
		if wait > 0 {
			err = s.st.WriteWithin(ctx, wait, body)
		} else {
			err = s.st.Write(ctx, body)
		}
		return rejects, err
	}
}

// createSaved creates one spec inside a savepoint, so a failure undoes
// only that spec's writes.
func createSaved(ctx context.Context, c *creator, sp Spec) error {
	if err := c.tx.Savepoint("spool_line"); err != nil {
		return err
	}
	if _, err := c.create(ctx, sp, true); err != nil {
		if rerr := c.tx.RollbackTo("spool_line"); rerr != nil {
			return rerr
		}
		// The rolled-back writes may include a queue row the cache counted.
		c.forgetQueues()
		_ = c.tx.Release("spool_line")
		return err
	}
	return c.tx.Release("spool_line")
}
