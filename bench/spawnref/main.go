// Command spawnref is the spawn reference for bench/e2e.sh: it runs a
// command (default "true") N times, W at a time, from W goroutines, and
// exits non-zero if any run failed. It measures what starting and reaping
// a process costs from Go on this machine, with no queue at all, so a
// queue's throughput can be read as a fraction of it.
//
//	spawnref [-n 2000] [-c 4] [-v] [command [args...]]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	n := flag.Int("n", 2000, "how many runs")
	c := flag.Int("c", 4, "goroutines, each running one process at a time")
	v := flag.Bool("v", false, "print the elapsed time and rate on stderr")
	flag.Parse()
	argv := flag.Args()
	if len(argv) == 0 {
		argv = []string{"true"}
	}
	if *n < 0 || *c < 1 {
		fmt.Fprintln(os.Stderr, "spawnref: -n must be >= 0 and -c >= 1")
		os.Exit(2)
	}
	// Resolve PATH once: the reference measures fork, exec and wait only.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawnref:", err)
		os.Exit(1)
	}

	var next atomic.Int64
	var mu sync.Mutex
	var failed int
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*n) {
				cmd := exec.Command(path, argv[1:]...)
				cmd.Args[0] = argv[0]
				if err := cmd.Run(); err != nil {
					mu.Lock()
					if failed == 0 {
						firstErr = err
					}
					failed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if *v {
		fmt.Fprintf(os.Stderr, "spawnref: %d runs, %d at a time, in %v (%.0f/s)\n",
			*n, *c, elapsed, float64(*n)/elapsed.Seconds())
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "spawnref: %d of %d runs failed; first: %v\n", failed, *n, firstErr)
		os.Exit(1)
	}
}
