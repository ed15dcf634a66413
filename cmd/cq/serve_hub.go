package main

// The event hub of cq serve (docs/serve-streams.md, "Many clients"): one
// reader of the event log for every GET /events stream. Each stream would
// otherwise read the store every followPoll and encode every event itself;
// with the hub the store is read once per poll whatever the number of
// clients, each event is encoded once, and a stream only copies bytes.

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// hubWindow is how many of the newest events the hub keeps in memory. A
// stream further behind than that (a reconnection after a long gap, a
// client slower than the writers) reads the store until it catches up.
const hubWindow = 4096

// hubFrame is one event as a stream sends it: `id: SEQ`, `data: ` the
// line cq events prints for it, and the blank line that ends it.
type hubFrame struct {
	seq   int64
	frame []byte
}

// eventHub keeps the newest events of the log, in order, for the streams
// to read, and wakes them when more come.
type eventHub struct {
	st  *queue.Store
	log *slog.Logger

	mu sync.Mutex
	// base: the window holds every event after base up to last; none
	// between them is missing (a seq that is not there was never
	// committed, or was swept).
	base, last int64
	win        []hubFrame
	// wake is closed when events are added, then replaced.
	wake chan struct{}
}

// newEventHub is a hub whose window begins at the log's current end.
func newEventHub(ctx context.Context, st *queue.Store, log *slog.Logger) (*eventHub, error) {
	last, err := st.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	return &eventHub{st: st, log: log, base: last, last: last, wake: make(chan struct{})}, nil
}

// run reads the log every followPoll until ctx ends. A failed read is
// logged (once until one succeeds) and tried again at the next poll; the
// streams wait meanwhile, pinging their clients.
func (h *eventHub) run(ctx context.Context) {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	failing := false
	for {
		for {
			h.mu.Lock()
			last := h.last
			h.mu.Unlock()
			evs, err := h.st.Events(ctx, last, eventsPage)
			if err == nil && len(evs) > 0 {
				err = h.add(evs)
			}
			if err != nil {
				if ctx.Err() == nil && !failing {
					h.log.Warn("serve.events", "error", errorText(h.st.Backend().Explain(err)))
				}
				failing = true
				break
			}
			failing = false
			if len(evs) < eventsPage {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// add appends evs (the events after h.last, in order), drops what falls
// out of the window, and wakes the streams.
func (h *eventHub) add(evs []queue.Event) error {
	frames := make([]hubFrame, len(evs))
	for i, e := range evs {
		var b bytes.Buffer
		if err := writeSSEEvent(&b, e); err != nil {
			return err
		}
		frames[i] = hubFrame{seq: e.Seq, frame: b.Bytes()}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.win = append(h.win, frames...)
	if n := len(h.win) - hubWindow; n > 0 {
		h.base = h.win[n-1].seq
		// A new array now and then, so that the dropped frames are freed.
		h.win = append([]hubFrame(nil), h.win[n:]...)
	}
	h.last = frames[len(frames)-1].seq
	close(h.wake)
	h.wake = make(chan struct{})
	return nil
}

// after is what a stream that has sent everything up to since reads next:
// at most max frames of the window after since; behind when the window
// no longer holds the events right after since (the stream reads the
// store, up to at least base); wake is closed when more come.
func (h *eventHub) after(since int64, max int) (frames []hubFrame, behind bool, base int64, wake <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if since < h.base {
		return nil, true, h.base, h.wake
	}
	// The window is in seq order: the first frame after since by binary
	// search.
	lo, hi := 0, len(h.win)
	for lo < hi {
		m := (lo + hi) / 2
		if h.win[m].seq <= since {
			lo = m + 1
		} else {
			hi = m
		}
	}
	end := min(lo+max, len(h.win))
	// The frames are never changed once added: the stream may hold them
	// without the lock.
	return h.win[lo:end:end], false, h.base, h.wake
}
