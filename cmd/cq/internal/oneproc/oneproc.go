// Package oneproc gives a cq process one P (GOMAXPROCS 1) as early as
// package initialization allows; cq worker takes the default back.
//
// A short command does one goroutine's work. With a second P, every
// goroutine made runnable (database/sql's, the signal watcher's, the one
// that takes over during a cgo call) wakes or starts another thread. The
// change is made here rather than in main because a package that imports
// only runtime and syscall is initialized before most others: the
// runtime then has almost nothing to move off the P it drops; made in main,
// after every package's init, the same call cost a short command much
// more (docs/performance.md).
package oneproc

import (
	"runtime"
	"syscall"
)

// Saved is the GOMAXPROCS the process started with, for cq worker to take
// back; 0 when the user set GOMAXPROCS, which is left as it is.
var Saved int

func init() {
	if _, set := syscall.Getenv("GOMAXPROCS"); !set {
		Saved = runtime.GOMAXPROCS(1)
	}
}
