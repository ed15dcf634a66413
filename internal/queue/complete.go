package queue

import (
	"context"
	"encoding/json"
)

// IDHint is a task offered to shell completion: its id, and enough to tell
// tasks apart in a menu.
type IDHint struct {
	ID      string
	State   string
	Queue   string
	Command string
}

// narrowPrefix is how many ids a prefix may match for CompletionIDs to
// read them all and sort them; a wider prefix (one character of a ULID
// matches most of a store) is read newest first, stopping at the limit
// (see store.RunReader.CompletionTasks).
var narrowPrefix = 5000

// CompletionIDs returns up to limit tasks whose id starts with prefix,
// for shell completion: the tasks not yet terminal first, then the
// others, each group newest first. It only reads, and each of its reads
// stops after a bounded number of rows, so a Tab press stays cheap on a
// store of millions of tasks.
func (s *Store) CompletionIDs(ctx context.Context, prefix string, limit int) ([]IDHint, error) {
	if limit <= 0 {
		return nil, nil
	}
	tasks, err := s.st.CompletionTasks(ctx, prefix, limit, narrowPrefix)
	if err != nil || len(tasks) == 0 {
		return nil, err
	}
	out := make([]IDHint, len(tasks))
	for i, t := range tasks {
		var sp Spec
		_ = json.Unmarshal([]byte(t.Spec), &sp)
		out[i] = IDHint{ID: t.ID, State: t.State, Queue: t.Queue,
			Command: (&Task{Cmd: sp.Cmd, Shell: sp.Shell, Intent: sp.Intent}).Command()}
	}
	return out, nil
}

// QueueNames lists the names of every queue, in order, for shell
// completion.
func (s *Store) QueueNames(ctx context.Context) ([]string, error) {
	return s.st.CompletionQueues(ctx)
}
