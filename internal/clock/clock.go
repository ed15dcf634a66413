// Package clock holds cq's two clocks. The wall clock dates what users
// read and write: creation and end times, backoffs, schedules, retention.
// The host's boot-time clock judges leases: a step of the wall clock (an
// NTP correction, a date set by hand, a virtual machine restored from a
// snapshot) does not move it, so it never expires a healthy lease, and it
// goes on counting while the host is suspended, so a lease held across a
// suspension expires as its time says.
package clock

import (
	"sync/atomic"
	"time"
)

// BootTime is a reading of the host's boot-time clock: the time since the
// host booted, suspensions included, and the id of that boot. Readings of
// two boots cannot be compared: the clock starts again at zero.
type BootTime struct {
	// ID is the boot id the kernel draws at each boot; "" when it cannot
	// be read, and then the reading is not to be trusted for leases.
	ID string
	// Since is the time since that boot.
	Since time.Duration
}

// Add is the reading d later on the same boot.
func (b BootTime) Add(d time.Duration) BootTime { return BootTime{ID: b.ID, Since: b.Since + d} }

// wall is the wall clock in use: time.Now unless SetWall replaced it.
var wall atomic.Pointer[func() time.Time]

// Wall reads the wall clock.
func Wall() time.Time {
	if f := wall.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// SetWall makes Wall read f (nil: time.Now again). Only tests call it, to
// step the wall clock of a whole process without touching the host's.
func SetWall(f func() time.Time) {
	if f == nil {
		wall.Store(nil)
		return
	}
	wall.Store(&f)
}

// Boot reads the host's boot-time clock.
func Boot() BootTime {
	d, ok := sinceBoot()
	if !ok {
		return BootTime{}
	}
	return BootTime{ID: bootID(), Since: d}
}

// Following is a boot clock that moves with wall and never reboots: for
// tests that move a Store's wall clock by hand and want its leases to
// expire with it.
func Following(wall func() time.Time) func() BootTime {
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() BootTime { return BootTime{ID: "following-wall", Since: wall().Sub(epoch)} }
}
