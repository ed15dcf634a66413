package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary act as cq: testscript puts a "cq" that
// runs main into $PATH, for the .txtar scripts and for tests that start
// many cq processes at once.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"cq": func() { os.Exit(run(os.Args[1:])) },
	})
}
