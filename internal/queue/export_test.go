package queue

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// WriteRows writes the rows q reads (with args), one line each, its
// values ended by |: tests compare such renderings of the store before
// and after a step that must change nothing.
func WriteRows(t testing.TB, sb *strings.Builder, d *sql.DB, q string, args ...any) {
	t.Helper()
	rows, err := d.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			text := fmt.Sprint(v)
			if b, ok := v.([]byte); ok {
				text = string(b)
			}
			sb.WriteString(strings.TrimSpace(strings.ReplaceAll(text, "\n", " ")))
			sb.WriteByte('|')
		}
		sb.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// RecordPerRow makes s record every start and end of a cycle with its
// own statements (startTx, finishTx) instead of the batched UPDATEs, so
// that tests can check the two write the same.
func RecordPerRow(s *Store) { s.perRow = true }

// SetNarrowPrefix sets how many ids a prefix may match for CompletionIDs
// to sort them all, so a small store takes the path of a wide prefix.
func SetNarrowPrefix(n int) func() {
	old := narrowPrefix
	narrowPrefix = n
	return func() { narrowPrefix = old }
}

// TimeoutQueuedRuns is TimeoutQueuedRunsThen with nothing to kill,
// counting the runs it ended.
func (s *Store) TimeoutQueuedRuns(ctx context.Context) (int, error) {
	r, err := s.TimeoutQueuedRunsThen(ctx, nil)
	return len(r), err
}

// WarnWaiting is one WarnWaitingStep of WarnBatch tasks per queue.
func (s *Store) WarnWaiting(ctx context.Context) (int, error) {
	n, _, err := s.WarnWaitingStep(ctx, WarnBatch)
	return n, err
}

// ReapExpired is ReapExpiredThen with nothing to kill.
func (s *Store) ReapExpired(ctx context.Context) ([]Reaped, error) {
	return s.ReapExpiredThen(ctx, nil)
}
