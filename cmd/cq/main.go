// Command cq is a durable job queue for shell pipelines, cron jobs, CI
// pipelines and operators.
//
// The runtime's periodic GOMAXPROCS update (it re-reads the cgroup CPU
// limit from sysmon) is off: a cq command lives a few milliseconds, and
// the re-read was a measurable part of each (docs/performance.md).
// GOMAXPROCS is still set from the CPU limit at start.
//
//go:debug updatemaxprocs=0
package main

import (
	"os"
	"runtime/pprof"

	// One P from package initialization on: a short command does one
	// goroutine's work, and a second P only wakes threads (docs/performance.md).
	_ "github.com/cq-dev/cq/cmd/cq/internal/oneproc"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/cq-dev/cq/internal/worker"
)

// SQLite frees and allocates the same pages around every statement:
// glibc keeps them mapped instead of trimming and faulting them in again.
// In init, not main, so the test binary run as cq does the same.
func init() { sqlite.KeepFreedHeap() }

func main() {
	// CQ_CPUPROFILE=FILE writes a CPU profile of this command, for
	// profiling the hot paths (make bench, issue reports).
	if path := os.Getenv("CQ_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				code := run(os.Args[1:])
				pprof.StopCPUProfile()
				f.Close()
				os.Exit(code)
			}
		}
	}
	os.Exit(run(os.Args[1:]))
}

// run executes one cq command line and returns its exit code.
func run(args []string) int {
	if len(args) == 1 && args[0] == worker.SupervisorArg {
		worker.IgnoreStopSignals()
		return worker.RunSupervisor(os.Stdin)
	}
	app := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	return execute(app, args)
}
