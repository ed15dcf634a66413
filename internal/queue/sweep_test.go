package queue

import (
	"slices"
	"testing"
)

// TestMergeWindows: windows come out sorted, with those that overlap or
// lie within sweepGap merged, empty ones dropped, and at most sweepMax
// that still cover every window given.
func TestMergeWindows(t *testing.T) {
	t.Parallel()
	got := mergeWindows([]seqWindow{{50000, 60000}, {5, 10}, {9, 20}, {20 + sweepGap, 30000}, {7, 3}, {90000, 90000}})
	want := []seqWindow{{5, 30000}, {50000, 60000}, {90000, 90000}}
	if !slices.Equal(got, want) {
		t.Errorf("mergeWindows = %v, want %v", got, want)
	}
	var many []seqWindow
	for i := range int64(3 * sweepMax) {
		lo := i * 10 * sweepGap
		many = append(many, seqWindow{lo, lo + 1})
	}
	got = mergeWindows(slices.Clone(many))
	if len(got) != sweepMax {
		t.Fatalf("%d windows left of %d, want %d", len(got), len(many), sweepMax)
	}
	for _, w := range many {
		i := slices.IndexFunc(got, func(g seqWindow) bool { return g[0] <= w[0] && w[1] <= g[1] })
		if i < 0 {
			t.Fatalf("window %v is not covered by %v", w, got)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i][0] <= got[i-1][1] {
			t.Fatalf("windows overlap or are out of order: %v", got)
		}
	}
}
