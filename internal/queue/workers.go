package queue

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// WorkerParams is what a worker says of itself in the workers table.
type WorkerParams struct {
	ID          string
	Host        string
	PID         int
	Queues      []string // none: every queue
	Concurrency int
	// Lease is the worker's lease TTL: it counts as live until this long
	// after its latest WorkerSeen.
	Lease time.Duration
}

// Worker is a live worker as cq workers shows it (its JSON shape
// in docs/commands.md).
type Worker struct {
	ID          string   `json:"id"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Queues      []string `json:"queues"` // empty: every queue
	Concurrency int      `json:"concurrency"`
	// Runs counts the runs it holds now (queued, running or cancelling).
	Runs      int    `json:"runs"`
	StartedAt string `json:"started_at"`
	LastSeen  string `json:"last_seen"`
}

// WorkerSeen records that worker p lives, for another lease TTL from now:
// its row is written when it is missing (the first call, or after a
// maintenance pass deleted it as long dead) and refreshed otherwise,
// keeping its start time.
func (s *Store) WorkerSeen(ctx context.Context, p WorkerParams) error {
	queues := p.Queues
	if queues == nil {
		queues = []string{}
	}
	qj, err := json.Marshal(queues)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx store.Tx, now time.Time) error {
		l := s.leaseNow(now).grant(p.Lease)
		return tx.WorkerSave(ctx, store.WorkerSeen{ID: p.ID, Host: p.Host, PID: p.PID, Queues: string(qj), Concurrency: p.Concurrency,
			LeaseMS: p.Lease.Milliseconds(), At: FormatTime(now), LeaseExpires: l.Expires, BootID: l.BootID, LeaseUntilNS: l.UntilNS})
	})
}

// WorkerLeft deletes worker id's row: it stopped cleanly.
func (s *Store) WorkerLeft(ctx context.Context, id string) error {
	return s.write(ctx, func(tx store.Tx, _ time.Time) error {
		return tx.WorkerDelete(ctx, id)
	})
}

// Workers lists the live workers, by start time, each with the number
// of runs it holds.
func (s *Store) Workers(ctx context.Context) ([]Worker, error) {
	ws, err := s.st.WorkerListLive(ctx, s.leaseNow(s.now()).clock())
	if err != nil {
		return nil, err
	}
	out := make([]Worker, len(ws))
	for i := range ws {
		w := &ws[i]
		out[i] = Worker{ID: w.ID, Host: w.Host, PID: w.PID, Concurrency: w.Concurrency, StartedAt: w.StartedAt, LastSeen: w.LastSeen}
		// A row is written only by WorkerSeen; should its queues be
		// unreadable all the same, the worker is still listed.
		if json.Unmarshal([]byte(w.Queues), &out[i].Queues) != nil || out[i].Queues == nil {
			out[i].Queues = []string{}
		}
	}
	if len(out) == 0 {
		return out, nil
	}
	counts := map[string]int{}
	if err := s.st.WorkerRunCounts(ctx, func(w string, n int) { counts[w] = n }); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Runs = counts[out[i].ID]
	}
	return out, nil
}

// AnyWorkerLive reports whether at least one worker is live.
func (s *Store) AnyWorkerLive(ctx context.Context) (bool, error) {
	return anyWorkerLive(ctx, s.st, s.leaseNow(s.now()))
}

func anyWorkerLive(ctx context.Context, q store.Reader, now leaseNow) (bool, error) {
	return q.WorkerAnyLive(ctx, now.clock())
}

// SweepWorkers deletes the rows of workers whose lease passed more than
// dead ago (by the wall clock): gone without a word, long since. A
// worker that lives after all writes its row again at its next tick.
func (s *Store) SweepWorkers(ctx context.Context, dead time.Duration) (int, error) {
	var n int
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		var err error
		n, err = tx.WorkerSweep(ctx, FormatTime(now.Add(-dead)))
		return err
	})
	return n, err
}
