package main

import (
	"os"
	"runtime"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cq-dev/cq/cmd/cq/internal/oneproc"
)

// TestMain lets the test binary act as cq: testscript puts a "cq" that
// runs main into $PATH, for the .txtar scripts and for tests that start
// many cq processes at once.
func TestMain(m *testing.M) {
	// oneproc left this binary one P, as it leaves cq; the tests
	// get the default back, and the binary run as cq keeps one P as cq
	// does (cq worker takes the default back itself).
	if oneproc.Saved > 0 {
		runtime.GOMAXPROCS(oneproc.Saved)
	}
	testscript.Main(m, map[string]func(){
		"cq": func() {
			if oneproc.Saved > 0 {
				runtime.GOMAXPROCS(1)
			}
			os.Exit(run(os.Args[1:]))
		},
	})
}
