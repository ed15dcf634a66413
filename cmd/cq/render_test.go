package main

import (
	"slices"
	"testing"
	"time"
)

func TestFitWidths(t *testing.T) {
	for _, c := range []struct {
		name    string
		header  []string
		natural []int
		budget  int
		want    []int
	}{
		{"fits as it is", []string{"ID", "PRI", "COMMAND"}, []int{26, 5, 40}, 80, []int{26, 5, 40}},
		{"the widest gives way alone", []string{"ID", "PRI", "COMMAND"}, []int{26, 5, 100}, 60, []int{26, 5, 29}},
		{"the widest meet at one cap, the spare cell to the first", []string{"ID", "PRI", "REASON", "COMMAND"}, []int{20, 5, 30, 30}, 60, []int{19, 5, 18, 18}},
		{"the handle keeps 13 while others give way", []string{"ID", "QUEUE", "CREATED", "COMMAND"}, []int{26, 8, 8, 100}, 40, []int{13, 8, 8, 11}},
		{"a short handle keeps its width", []string{"QUEUE", "BACKOFF", "COMMAND"}, []int{7, 10, 100}, 20, []int{7, 7, 6}},
		{"an age keeps its width while others give way", []string{"ID", "CREATED", "COMMAND"}, []int{26, 8, 100}, 24, []int{13, 8, 3}},
		{"a state is kept whole", []string{"ID", "STATE", "COMMAND"}, []int{26, 9, 100}, 25, []int{13, 9, 3}},
		{"when nothing else fits, nothing is kept", []string{"ID", "STATE", "PRI"}, []int{26, 9, 5}, 6, []int{2, 2, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := fitWidths(c.natural, keepWidths(c.header, c.natural), c.budget)
			if !slices.Equal(got, c.want) {
				t.Errorf("fitWidths(%v, %d) = %v, want %v", c.natural, c.budget, got, c.want)
			}
			if sumInts(got) > c.budget {
				t.Errorf("fitWidths(%v, %d) = %v: over the budget", c.natural, c.budget, got)
			}
		})
	}
}

func TestHumanTimes(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"2025-06-01T11:59:59.6Z": "just now",
		"2025-06-01T11:59:15Z":   "45s ago",
		"2025-06-01T11:57:00Z":   "3m ago",
		"2025-06-01T10:00:00Z":   "2h ago",
		"2025-05-31T00:00:00Z":   "36h ago",
		"2025-05-27T12:00:00Z":   "5d ago",
		"2025-06-01T12:00:05Z":   "in 5s",
		"never":                  "never",
		"":                       "",
	} {
		if got := ageOf(in, now); got != want {
			t.Errorf("ageOf(%q) = %q, want %q", in, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:                     "850ms",
		1260 * time.Millisecond:                    "1.2s",
		59990 * time.Millisecond:                   "59.9s",
		3*time.Minute + 4*time.Second:              "3m04s",
		2*time.Hour + 5*time.Minute:                "2h05m",
		3*24*time.Hour + 4*time.Hour + time.Minute: "3d04h",
		-time.Second:                               "-",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestCleanCellAndWrap(t *testing.T) {
	if got := cleanCell("a\tb\nc\x1b[31md\x7f"); got != "a b c [31md " {
		t.Errorf("cleanCell = %q", got)
	}
	got := wrapTo("echo one two three 日本語日本語", 10)
	want := []string{"echo one", "two three", "日本語日本", "語"}
	if !slices.Equal(got, want) {
		t.Errorf("wrapTo = %q, want %q", got, want)
	}
}
