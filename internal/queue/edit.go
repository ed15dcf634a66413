package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cq-dev/cq/internal/store"
)

// TaskSpec returns a task's full id and its stored spec (without its id),
// the spec cq clone starts from.
func (s *Store) TaskSpec(ctx context.Context, ref string) (string, Spec, error) {
	var sp Spec
	id, err := resolve(ctx, s.st, ref)
	if err != nil {
		return "", sp, err
	}
	raw, _, err := s.st.TaskSpec(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", sp, notFoundf("no task %q", ref)
	}
	if err != nil {
		return "", sp, err
	}
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		return "", sp, fmt.Errorf("task %s: stored spec unreadable: %w", id, err)
	}
	return id, sp, nil
}

// ChangeTask changes the spec of a task no worker holds yet (inbox, todo
// or blocked): edit gets a copy of the current spec and returns the new
// one, which is normalised and stored, with the queue and priority
// columns derived from it, under a CAS on the task's state and with a
// task.changed event saying what changed. It returns the task's id, its
// state and the names of the fields that changed (none: nothing was
// written). The task keeps its seq, so a change never moves it within its
// key lane, and the key and --unique cannot change: the lane a task
// stands in is fixed once it passed the gateway step.
func (s *Store) ChangeTask(ctx context.Context, ref string, edit func(Spec) (Spec, error)) (string, string, []string, error) {
	var changed []string
	id, state, err := s.mutate(ctx, ref, func(tx store.Tx, now time.Time, t *taskRow) error {
		changed = nil
		if t.State != TaskInbox && t.State != TaskTodo && t.State != TaskBlocked {
			return refused(t, "change")
		}
		var cur Spec
		if err := json.Unmarshal([]byte(t.Spec), &cur); err != nil {
			return fmt.Errorf("task %s: stored spec unreadable: %w", t.ID, err)
		}
		in := cur
		in.Env = maps.Clone(cur.Env)
		in.Cmd = slices.Clone(cur.Cmd)
		next, err := edit(in)
		if err != nil {
			return err
		}
		next.ID = ""
		if next, err = next.Normalize(); err != nil {
			return err
		}
		if next.Key != cur.Key || next.Unique != cur.Unique {
			return invalidf("cannot change the key of task %s: its place in a key lane is fixed (clone it with the new --key instead)", t.ID)
		}
		diff := specDiff(cur, next)
		if len(diff) == 0 {
			return nil
		}
		for name := range diff {
			changed = append(changed, name)
		}
		sort.Strings(changed)
		if next.Queue != cur.Queue {
			if err := ensureQueue(ctx, tx, now, next.Queue); err != nil {
				return err
			}
		}
		prio, _ := ParsePriority(next.Priority)
		ok, err := tx.TaskChangeSpec(ctx, store.TaskSpecChange{ID: t.ID, From: t.State,
			Spec: next.Canonical(), Queue: next.Queue, Priority: prio, At: FormatTime(now)})
		if err != nil {
			return err
		}
		if !ok {
			return conflictf("task %s changed state meanwhile; try again", t.ID)
		}
		return addEvent(ctx, tx, now, event{Kind: "task.changed", TaskID: t.ID, From: t.State, To: t.State, Data: diff})
	})
	return id, state, changed, err
}

// specDiff lists the fields that differ between two normalised specs,
// each as {"from": old, "to": new}. Environment values may be secrets
// and events are read by anyone who can read the store's log, so env
// records only the names set (added or given a new value) and unset.
func specDiff(a, b Spec) map[string]any {
	d := map[string]any{}
	val := func(name string, x, y any) {
		xb, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		if string(xb) != string(yb) {
			d[name] = map[string]any{"from": json.RawMessage(xb), "to": json.RawMessage(yb)}
		}
	}
	opt := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var ac, bc any
	if a.Cmd != nil {
		ac = a.Cmd
	}
	if b.Cmd != nil {
		bc = b.Cmd
	}
	val("cmd", ac, bc)
	val("shell", opt(a.Shell), opt(b.Shell))
	val("intent", opt(a.Intent), opt(b.Intent))
	var ap, bp any
	if len(a.Payload) > 0 {
		ap = a.Payload
	}
	if len(b.Payload) > 0 {
		bp = b.Payload
	}
	val("payload", ap, bp)
	val("queue", a.Queue, b.Queue)
	val("priority", a.Priority, b.Priority)
	val("timeout", opt(a.Timeout), opt(b.Timeout))
	var ar, br any
	if a.Retries != nil {
		ar = *a.Retries
	}
	if b.Retries != nil {
		br = *b.Retries
	}
	val("retries", ar, br)
	val("cwd", opt(a.Cwd), opt(b.Cwd))
	val("probe", a.Probe, b.Probe)
	set, unset := []string{}, []string{}
	for k, v := range b.Env {
		if old, ok := a.Env[k]; !ok || old != v {
			set = append(set, k)
		}
	}
	for k := range a.Env {
		if _, ok := b.Env[k]; !ok {
			unset = append(unset, k)
		}
	}
	if len(set)+len(unset) > 0 {
		sort.Strings(set)
		sort.Strings(unset)
		d["env"] = map[string]any{"set": set, "unset": unset}
	}
	return d
}

// Retried is a task cq retry brought back and the state it is in now.
type Retried struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// RetryWithDependents is cq retry --deps: it retries the task as Retry
// does, and every dependent that its failure or cancel cancelled,
// transitively (a dependent whose reason names a task being brought
// back), in dependency order: each goes back behind its dependency,
// blocked until that one is done. All of it is one transaction: if any
// of those tasks cannot be retried (another of its dependencies ended
// failed, its unique key is held) nothing changes. The task itself comes
// first in the result, then its dependents in the order they were
// retried.
func (s *Store) RetryWithDependents(ctx context.Context, ref, reason string) ([]Retried, error) {
	var out []Retried
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		out = out[:0]
		id, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		order, err := cancelledDependents(ctx, tx, id)
		if err != nil {
			return err
		}
		for i, tid := range append([]string{id}, order...) {
			t, err := getTask(ctx, tx, tid)
			if err != nil {
				return err
			}
			why := reason
			if i > 0 && why == "" {
				why = "retried with dependency " + id
			}
			if err := retryTask(ctx, tx, now, t, why); err != nil {
				if i > 0 {
					return &Error{Kind: KindOf(err), Msg: fmt.Sprintf("%v (a dependent of %s; nothing changed)", err, id)}
				}
				return err
			}
			state, err := tx.TaskState(ctx, tid)
			if err != nil {
				return err
			}
			out = append(out, Retried{ID: tid, State: state})
		}
		return nil
	})
	return out, err
}

// cancelledDependents returns the tasks that root's end cancelled,
// transitively, each after every dependency of it that is in the list.
// A dependent counts when it is cancelled for a reason that names one of
// these tasks (section 2's cascade writes "dependency ID failed" or
// "dependency ID cancelled"); one cancelled by a user is left alone.
func cancelledDependents(ctx context.Context, tx store.Reader, root string) ([]string, error) {
	in := map[string]bool{root: true}
	var found []string
	for next := []string{root}; len(next) > 0; {
		dep := next[0]
		next = next[1:]
		ids, err := tx.TaskDependentsCancelled(ctx, dep, "dependency "+dep+" failed", "dependency "+dep+" cancelled")
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if !in[id] {
				in[id] = true
				found = append(found, id)
				next = append(next, id)
			}
		}
	}
	// Dependency order (Kahn's algorithm over the edges inside the set),
	// ties in the order found: a task is retried only once all of its
	// dependencies in the set are back, so none of them still looks dead.
	waits := map[string]int{}
	after := map[string][]string{}
	for _, id := range found {
		deps, err := tx.TaskDepsOf(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, dep := range deps {
			if in[dep] && dep != root {
				waits[id]++
				after[dep] = append(after[dep], id)
			}
		}
	}
	var order []string
	done := map[string]bool{}
	for len(order) < len(found) {
		progress := false
		for _, id := range found {
			if done[id] || waits[id] > 0 {
				continue
			}
			done[id], progress = true, true
			order = append(order, id)
			for _, d := range after[id] {
				waits[d]--
			}
		}
		if !progress {
			return nil, fmt.Errorf("dependency cycle among the dependents of %s", root)
		}
	}
	return order, nil
}
