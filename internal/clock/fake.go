package clock

import (
	"sync"
	"time"
)

// Fake is a wall clock that moves only when a test moves it, so that
// schedules, backoffs and retention are tested without sleeping. Safe for
// concurrent use; hand its Now to a store.
type Fake struct {
	mu sync.Mutex
	t  time.Time
}

// NewFake is a Fake reading t.
func NewFake(t time.Time) *Fake { return &Fake{t: t} }

// Now reads the clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Add moves the clock by d.
func (c *Fake) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
