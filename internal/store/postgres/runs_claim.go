package postgres

import (
	"context"
	"fmt"

	"github.com/cq-dev/cq/internal/store"
)

// Claims never wait for another claimer. In a transaction, a queue with
// a concurrency limit has its row locked while the claim reads its count
// of live runs (queues.running, kept by the trigger on runs) and adds its
// own runs, so that the limit holds across hosts; the runnable heads are
// locked as they are read. Both skip a row another transaction holds.
const (
	// sqlClaimQueuesPool reads the queues outside a transaction, where
	// nothing is locked.
	sqlClaimQueuesPool = `SELECT ` + queueCols + `, CASE WHEN concurrency > 0 THEN running ELSE 0 END
		FROM queues WHERE NOT paused AND ($1::text[] IS NULL OR name = ANY($1))`
	// sqlClaimQueuesTx locks the rows of limited queues that no other
	// transaction holds; one another holds (a claim, or the end of one of
	// its runs, in flight) is listed as full, its count unknown until that
	// transaction ends: this claim takes nothing from it and the next one
	// looks again. held is MATERIALIZED so that the locking read runs once.
	sqlClaimQueuesTx = `WITH held AS MATERIALIZED (
			SELECT ` + queueCols + `, running FROM queues
			WHERE NOT paused AND concurrency > 0 AND ($1::text[] IS NULL OR name = ANY($1))
			FOR NO KEY UPDATE SKIP LOCKED)
		SELECT ` + queueCols + `, running FROM held
		UNION ALL
		SELECT ` + queueCols + `, CASE WHEN concurrency > 0 THEN greatest(running, concurrency) ELSE 0 END
		FROM queues q WHERE NOT paused AND ($1::text[] IS NULL OR name = ANY($1))
			AND NOT EXISTS (SELECT 1 FROM held WHERE held.name = q.name)`

	sqlClaimHeads = `SELECT id, priority, COALESCE(seq,0), attempts, spec FROM tasks
		WHERE queue = $1 AND state = 'todo' AND lane_head ORDER BY priority, seq LIMIT $2`
	// sqlClaimHeadsTx locks the heads it returns; the lock is taken below
	// the LIMIT, so a head another claimer holds does not count.
	sqlClaimHeadsTx = sqlClaimHeads + ` FOR NO KEY UPDATE SKIP LOCKED`

	// sqlClaimTasks moves the tasks todo → doing (a CAS on each: the
	// count it returns says whether all still were) and inserts their
	// runs, whose live count the trigger on runs adds to their queues.
	sqlClaimTasks = `WITH moved AS (
			UPDATE tasks SET state = 'doing', updated_at = $1, attempts = attempts + 1, todo_at = NULL
			WHERE id = ANY($2::text[]) AND state = 'todo' RETURNING 1),
		ins AS (
			INSERT INTO runs (id, task_id, attempt, state, queue, worker, host, lease_token, lease_expires_at,
				boot_id, claimed_ns, lease_until_ns, created_at, probe)
			SELECT r.id, r.task_id, r.attempt, 'queued', r.queue, $3, $4, r.token, $5, $6, $7, $8, $1, r.probe
			FROM unnest($2::text[], $9::text[], $10::int4[], $11::text[], $12::text[], $13::bool[])
				AS r(task_id, id, attempt, queue, token, probe)
			RETURNING 1)
		SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM ins)`
)

func (r *reads) ClaimQueues(ctx context.Context, names []string) ([]store.ClaimQueue, error) {
	q := sqlClaimQueuesPool
	if r.tx != nil {
		q = sqlClaimQueuesTx
	}
	var filter []string // nil: every queue
	if len(names) > 0 {
		filter = names
	}
	rows, err := r.q.Query(r.cx(ctx), q, filter)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ClaimQueue
	for rows.Next() {
		out = append(out, store.ClaimQueue{})
		c := &out[len(out)-1]
		q := &c.Queue
		if err := rows.Scan(&q.Name, &q.Paused, &q.Concurrency, &q.Retries, &q.BackoffMS, &q.TransientRetries, &q.TimeoutRetries,
			&q.TimeoutMS, &q.StartTimeoutMS, &q.WarnAfterMS, &q.TimeoutCountsAsks, &c.Live); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

func (r *reads) ClaimHeads(ctx context.Context, queue string, limit int, out []store.ClaimHead) ([]store.ClaimHead, error) {
	if limit <= 0 {
		return out, nil
	}
	q := sqlClaimHeads
	if r.tx != nil {
		q = sqlClaimHeadsTx
	}
	rows, err := r.q.Query(r.cx(ctx), q, queue, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		out = append(out, store.ClaimHead{Queue: queue})
		h := &out[len(out)-1]
		if err := rows.Scan(&h.ID, &h.Priority, &h.Seq, &h.Attempts, &h.Spec); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// ClaimTasks moves the tasks and inserts their runs in one statement.
func (tx *Tx) ClaimTasks(ctx context.Context, c store.Claim) error {
	n := len(c.Runs)
	if n == 0 {
		return nil
	}
	taskIDs, runIDs, queues, tokens := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, probes := make([]int32, n), make([]bool, n)
	for i, r := range c.Runs {
		taskIDs[i], runIDs[i], queues[i], tokens[i], attempts[i] = r.TaskID, r.RunID, r.Queue, r.Token, int32(r.Attempt)
		probes[i] = r.Probe
	}
	bootID, until, claimed := leaseValues(c.Lease, c.ClaimedNS)
	var moved, inserted int
	err := tx.ptx.QueryRow(tx.ctx, sqlClaimTasks, c.At, taskIDs, nullable(c.Worker), nullable(c.Host), c.Lease.Expires,
		bootID, claimed, until, runIDs, attempts, queues, tokens, probes).Scan(&moved, &inserted)
	if err != nil {
		return err
	}
	if moved != n {
		return fmt.Errorf("claim: %d of %d tasks were still todo", moved, n)
	}
	return nil
}
