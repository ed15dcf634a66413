package queue_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cq-dev/cq/internal/queue"
)

// TestCompletionIDs: the ids offered to shell completion are those of the
// prefix, tasks not yet terminal first, each group newest first, at most
// limit of them, whichever way the prefix is read (sorted through the
// primary key when narrow, read newest first when wide).
func TestCompletionIDs(t *testing.T) {
	b := setup(t)
	for i := range 40 {
		sp := queue.Spec{Queue: fmt.Sprintf("q%d", i%3), ID: fmt.Sprintf("t%d-%02d", i%2, i)}
		if i%4 == 1 {
			sp.Hold = true
		}
		res := b.create(t, sp, i%7 != 3)
		if i%5 == 2 {
			if _, _, err := b.st.Cancel(b.ctx, res.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	full, err := b.st.List(b.ctx, queue.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(prefix string, limit int) []string {
		var live, ended []string
		for _, tk := range full {
			if !strings.HasPrefix(tk.ID, prefix) {
				continue
			}
			if queue.TaskTerminal(tk.State) {
				ended = append(ended, tk.ID)
			} else {
				live = append(live, tk.ID)
			}
		}
		all := append(live, ended...)
		return all[:min(len(all), limit)]
	}
	for _, narrow := range []int{5000, 1} {
		restore := queue.SetNarrowPrefix(narrow)
		for _, c := range []struct {
			prefix string
			limit  int
		}{{"", 200}, {"", 5}, {"", 30}, {"t1", 200}, {"t1", 4}, {"t0-1", 200}, {"t1-03", 200}, {"x", 200}} {
			hints, err := b.st.CompletionIDs(b.ctx, c.prefix, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hints {
				got = append(got, h.ID)
				if h.Command != "true" || h.Queue == "" || h.State == "" {
					t.Errorf("hint %+v: want its state, queue and command", h)
				}
			}
			if w := want(c.prefix, c.limit); !slices.Equal(got, w) {
				t.Errorf("narrow %d, prefix %q, limit %d:\n got %v\nwant %v", narrow, c.prefix, c.limit, got, w)
			}
		}
		restore()
	}
}
