package worker

import (
	"context"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// spawned is a spawn's result, sent from its goroutine to the loop.
type spawned struct {
	r *run
	o *queue.Outcome // set when the process could not be started
}

// launch starts claimed tasks, each on a goroutine of its own: creating a
// run's folder and files and forking take longer than the transaction
// that records the ends of other runs, and the loop goes on with those
// meanwhile. Until the loop adopts its result (see adopt), a spawn counts
// as live in w.inflight, so that no slot is claimed twice.
func (w *Worker) launch(claims []*queue.Claimed) {
	for _, c := range claims {
		w.inflight++
		go func() {
			w.spawning <- struct{}{}
			r, o := w.spawn(c)
			<-w.spawning
			if o != nil {
				w.spawnedC <- spawned{r: r, o: o}
				return
			}
			r.armTimeout(c.Timeout, w.opt.Grace, w.askedFor(r))
			// The loop receives this before the exit below: it adopts
			// every spawn waiting in spawnedC before it reads an exit.
			w.spawnedC <- spawned{r: r}
			r.wait()
			r.endedAt = time.Now()
			w.forgetKid(r.pid)
			w.exited <- r
		}()
	}
}

// adopt takes in the spawns that have finished, sp first: their runs are
// live from here on, and their starts (queued → running) are recorded by
// the next transaction the loop makes, usually the one recording how
// another run ended, or by flushStarts within startDelay. A spawn that
// failed is recorded as the run's end at once.
func (w *Worker) adopt(ctx context.Context, sp *spawned) {
	var batch []spawned
	if sp != nil {
		batch = append(batch, *sp)
	}
drain:
	for {
		select {
		case s := <-w.spawnedC:
			batch = append(batch, s)
		default:
			break drain
		}
	}
	var failed []ending
	for _, s := range batch {
		w.inflight--
		r := s.r
		if s.o != nil {
			failed = append(failed, ending{r: r, f: queue.Finish{RunID: r.c.RunID, Token: r.c.Token, Outcome: *s.o, Release: r.giveBack}})
			if r.giveBack {
				w.spawnsFailing()
			}
		} else {
			w.spawnsSucceeding()
			w.mu.Lock()
			w.runs[r.c.RunID] = r
			w.mu.Unlock()
			w.pending = append(w.pending, r)
			if w.killAll != "" {
				// A graceful stop's grace is over: this one goes too.
				r.kill(w.killAll, 2*time.Second)
			}
		}
	}
	if len(w.pending) > 0 && !w.startArmed {
		w.startArmed = true
		w.startTimer.Reset(startDelay)
	}
	if len(failed) > 0 {
		w.record(ctx, failed, 0)
	}
}
