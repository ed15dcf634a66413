package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cq-dev/cq/internal/store"
)

// testRunOutput: the output kept with a run is read back byte for byte
// (a NUL and bytes that are not UTF-8 included), a second save replaces
// it, a run with none kept is ErrNotFound, and it goes with its task.
func testRunOutput(t *testing.T, b Backend) {
	e := newEnv(t, b)
	bin := []byte("line\x00\xff\xfe\n")
	e.write(func(tx store.Tx) error {
		if err := enqueue(tx, store.Task{ID: "a"}, at(0)); err != nil {
			return err
		}
		if err := claim(tx, "q", "w1", "h", at(1), wallLease(at(60)), "a"); err != nil {
			return err
		}
		if err := tx.RunOutputSave(ctx, store.RunOutput{RunID: "run-a", Host: "h1", Stdout: []byte("old")}); err != nil {
			return err
		}
		return tx.RunOutputSave(ctx, store.RunOutput{RunID: "run-a", Host: "h2", Stdout: bin, StdoutSize: 1 << 20, StderrSize: 0})
	})
	o, err := e.s.RunOutputGet(ctx, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if o.RunID != "run-a" || o.Host != "h2" || !bytes.Equal(o.Stdout, bin) || len(o.Stderr) != 0 || o.StdoutSize != 1<<20 || o.StderrSize != 0 {
		t.Errorf("RunOutputGet = %+v", o)
	}
	if _, err := e.s.RunOutputGet(ctx, "run-b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunOutputGet of a run with none kept = %v, want ErrNotFound", err)
	}
	e.write(func(tx store.Tx) error {
		if ok, err := tx.RunUpdate(ctx, store.RunUpdate{ID: "run-a", From: "queued", To: "cancelled"}); !ok || err != nil {
			return fmt.Errorf("end run-a: %v, %w", ok, err)
		}
		if err := finish(tx, "a", "doing", "cancelled", at(2)); err != nil {
			return err
		}
		_, _, err := tx.TaskDelete(ctx, "cancelled", []string{"a"})
		return err
	})
	if _, err := e.s.RunOutputGet(ctx, "run-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunOutputGet after the task's deletion = %v, want ErrNotFound", err)
	}
}
