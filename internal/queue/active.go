package queue

import (
	"context"
	"errors"

	"github.com/cq-dev/cq/internal/store"
)

// ActiveRun is a run that was live (queued, running or cancelling) when
// ActiveRuns read it, with its task: what cq wait --active waits for.
type ActiveRun struct {
	TaskID, RunID string
	State         string // the run's state as read
}

// ActiveRuns lists the live runs of the tasks doing now, of queue name
// ("" for every queue), newest task first, read in one snapshot: a task
// is doing exactly while one of its runs is live, and only then.
func (s *Store) ActiveRuns(ctx context.Context, name string) ([]ActiveRun, error) {
	var out []ActiveRun
	err := s.st.Snapshot(ctx, func(r store.Reader) error {
		out = out[:0]
		var ids []string
		f := store.TaskFilter{States: []string{TaskDoing}, Queue: name}
		if err := r.TaskListIDs(ctx, f, func(id string) error {
			ids = append(ids, id)
			return nil
		}); err != nil {
			return err
		}
		for _, id := range ids {
			run, state, err := r.RunLiveOfTask(ctx, id)
			if err != nil {
				return err
			}
			if run != "" {
				out = append(out, ActiveRun{TaskID: id, RunID: run, State: state})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RunStates reads the state of each run of ids; a run that no longer
// exists (cq cleanup deleted it with its task, which had ended) is left
// out.
func (s *Store) RunStates(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		st, err := s.st.RunState(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, nil
}
