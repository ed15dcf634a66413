// Command cq is a durable job queue for shell pipelines, cron jobs, CI
// pipelines and operators.
package main

import (
	"os"

	"github.com/cq-dev/cq/internal/worker"
)

func main() {
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
