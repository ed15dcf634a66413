package sqlite

import (
	"fmt"
	"strings"
	"sync"
)

// Batch is an INSERT whose rows a transaction collects (Add) and writes
// with one multi-row statement when it commits, or earlier at Flush: one
// statement for a transaction's rows costs far less than one per row.
// Rows written so get consecutive rowids in the order they were added.
type Batch struct {
	head string // INSERT INTO t (a, b, …) VALUES
	cols int

	mu    sync.Mutex
	texts map[int]string
}

// batchMaxRows bounds the rows of one statement; more are written in
// several.
const batchMaxRows = 256

// NewBatch returns the batch of rows of cols values each inserted by head,
// "INSERT INTO t (a, b, …) VALUES".
func NewBatch(head string, cols int) *Batch {
	return &Batch{head: head, cols: cols, texts: map[int]string{}}
}

// text is the statement for n rows, built once per n so that the
// connection's statement cache prepares it once.
func (b *Batch) text(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.texts[n]; ok {
		return q
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", b.cols), ",") + ")"
	q := b.head + strings.TrimSuffix(strings.Repeat(row+",", n), ",")
	b.texts[n] = q
	return q
}

// Add queues one row of b for this transaction. A row of another batch
// first writes the pending ones, so rows keep their order across batches.
func (t *Tx) Add(b *Batch, values ...any) error {
	if len(values) != b.cols {
		return fmt.Errorf("batch row has %d values, want %d", len(values), b.cols)
	}
	if t.batch != b {
		if err := t.Flush(); err != nil {
			return err
		}
		t.batch = b
	}
	t.rows = append(t.rows, values...)
	t.n++
	if t.n == batchMaxRows {
		return t.Flush()
	}
	return nil
}

// Flush writes the rows added so far. Statements whose effect depends on
// those rows being in place (reading or deleting them, or taking the next
// rowid of their table) must come after a Flush.
func (t *Tx) Flush() error {
	if t.n == 0 {
		return nil
	}
	err := t.Run(t.batch.text(t.n), t.rows...)
	t.rows, t.n = t.rows[:0], 0
	return err
}
