// Command cq is a durable job queue for shell pipelines, cron jobs, CI
// pipelines and operators.
package main

import (
	"os"
	"runtime/pprof"

	"github.com/cq-dev/cq/internal/worker"
)

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
		return worker.RunSupervisor(os.Stdin)
	}
	app := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	return execute(app, args)
}
