package queue

import (
	"context"
	"errors"
	"time"

	"github.com/cq-dev/cq/internal/db"
	"github.com/cq-dev/cq/internal/spool"
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
	return spool.Drain(home, s.Now, func(lines [][]byte) ([]spool.Reject, error) {
		var rejects []spool.Reject
		err := s.write(ctx, func(tx *db.Tx, now time.Time) error {
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
		})
		return rejects, err
	})
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
		c.queues = map[string]bool{}
		_ = c.tx.Release("spool_line")
		return err
	}
	return c.tx.Release("spool_line")
}
