//go:build !linux

package clock

import "time"

// Elsewhere than Linux there is no boot id to read: the empty id makes
// leases fall back to the wall clock.
func bootID() string { return "" }

var processStart = time.Now()

func sinceBoot() (time.Duration, bool) { return time.Since(processStart), true }
