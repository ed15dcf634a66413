//go:build race

package main

// raceEnabled: the tests run with the race detector, which makes a Go
// program several times larger and slower.
const raceEnabled = true
