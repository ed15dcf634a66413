package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cq-dev/cq/internal/store"
)

const (
	sqlClaimQueues = `SELECT ` + QueueCols + ` FROM queues WHERE paused = 0`
	// sqlQueueLive counts a queue's live runs from runs_live (its
	// condition repeated).
	sqlQueueLive = `SELECT COUNT(*) FROM runs WHERE queue = ? AND ` + runsLive
	// sqlClaimHeads reads a queue's next runnable tasks in claim order,
	// with only the columns a claim uses (each column the query returns
	// costs it time). The queue is bound as CAST(? AS TEXT), for the
	// reason given at sqlAdvanceLane: with a bare ? the statement was
	// prepared again on every claim, which cost several times what running
	// it does. The limit follows, written in the text (see ClaimHeads).
	sqlClaimHeads = `SELECT id, priority, COALESCE(seq,0), attempts, spec FROM tasks INDEXED BY tasks_claim
	WHERE queue = CAST(? AS TEXT) AND state = 'todo' AND lane_head = 1 ORDER BY priority, seq LIMIT `
)

// The batched statements of a claim, for k rows: built once per k.
var (
	claimHeadsSQL = newSQLByCount(func(k int) string { return sqlClaimHeads + strconv.Itoa(k) })
	// claimTasksSQL: k tasks todo → doing; ?1 is the state, ?2 the time.
	// The +state keeps the planner on the ids.
	claimTasksSQL = newSQLByCount(func(k int) string {
		return `UPDATE tasks SET state = ?, updated_at = ?, attempts = attempts + 1, todo_at = NULL
			WHERE id IN (` + strings.TrimSuffix(strings.Repeat("CAST(? AS TEXT),", k), ",") + `) AND +state = 'todo'`
	})
	// claimRunsSQL: k runs, 13 values each.
	claimRunsSQL = newSQLByCount(func(k int) string {
		return `INSERT INTO runs (id, task_id, attempt, state, queue, worker, host, lease_token, lease_expires_at,
			boot_id, claimed_ns, lease_until_ns, created_at, probe) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?),`, k), ",")
	})
)

func (r reads) ClaimQueues(ctx context.Context, names []string) ([]store.ClaimQueue, error) {
	q := sqlClaimQueues
	var args []any
	if len(names) > 0 {
		q += ` AND name IN (` + strings.TrimSuffix(strings.Repeat("?,", len(names)), ",") + `)`
		for _, w := range names {
			args = append(args, w)
		}
	}
	rows, err := r.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []store.ClaimQueue
	for rows.Next() {
		// Scanned in place (ScanQueue's order, QueueCols): one
		// allocation fewer per queue than ScanQueue's row.
		out = append(out, store.ClaimQueue{})
		q := &out[len(out)-1].Queue
		if err := rows.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
			&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks); err != nil {
			rows.Close()
			return nil, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The counts are read once the queues' read is done: one statement
	// at a time on the connection.
	for i := range out {
		if out[i].Concurrency > 0 {
			if err := r.q.QueryRowContext(ctx, sqlQueueLive, out[i].Name).Scan(&out[i].Live); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func (r reads) ClaimHeads(ctx context.Context, queue string, limit int, out []store.ClaimHead) ([]store.ClaimHead, error) {
	if limit <= 0 {
		return out, nil
	}
	// The limit is written in the statement (bound as a parameter it cost
	// the claim about a tenth more), rounded up to a power of two so that
	// there are few statements to prepare.
	text := 1
	for text < limit {
		text *= 2
	}
	rows, err := r.q.QueryContext(ctx, claimHeadsSQL.get(text), queue)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for n := 0; n < limit && rows.Next(); n++ {
		// Scanned in place: a head of its own would escape to the heap.
		out = append(out, store.ClaimHead{Queue: queue})
		h := &out[len(out)-1]
		if err := rows.Scan(&h.ID, &h.Priority, &h.Seq, &h.Attempts, &h.Spec); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// ClaimTasks moves the tasks with one UPDATE (a CAS on each: all must
// still be todo) and writes the runs with one INSERT, per chunk.
func (t *Tx) ClaimTasks(ctx context.Context, c store.Claim) error {
	err := inChunks(len(c.Runs), func(lo, hi int) error {
		args := make([]any, 0, 2+hi-lo)
		args = append(args, "doing", c.At)
		for _, r := range c.Runs[lo:hi] {
			args = append(args, r.TaskID)
		}
		res, err := t.ExecMany(ctx, claimTasksSQL.get(hi-lo), args...)
		if err != nil {
			return err
		}
		if got, _ := res.RowsAffected(); got != int64(hi-lo) {
			return fmt.Errorf("claim: %d of %d tasks were still todo", got, hi-lo)
		}
		return nil
	})
	if err != nil {
		return err
	}
	bootID, until, claimed := leaseValues(c.Lease, c.ClaimedNS)
	worker, host := nullable(c.Worker), nullable(c.Host)
	return inChunks(len(c.Runs), func(lo, hi int) error {
		args := make([]any, 0, 13*(hi-lo))
		for _, r := range c.Runs[lo:hi] {
			args = append(args, r.RunID, r.TaskID, r.Attempt, r.Queue, worker, host, r.Token, c.Lease.Expires, bootID, claimed, until, c.At, r.Probe)
		}
		return t.Run(claimRunsSQL.get(hi-lo), args...)
	})
}
