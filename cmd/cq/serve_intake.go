package main

// Group commit for POST /tasks (docs/serve.md, "Many senders"): the specs
// of single-task POSTs that arrive while a transaction is being written
// are stored together in the next one. A sender still gets its answer
// only once its task is committed; what is saved is a transaction (its
// begin, commit and flush) per request.

import (
	"context"

	"github.com/cq-dev/cq/internal/queue"
)

// intakeMax is how many specs one group transaction stores at most.
const intakeMax = 256

// intakeLoops is how many group transactions may be on their way at once:
// two, so that one is built while the other commits.
const intakeLoops = 2

// intakeReq is one POST's spec, and where its outcome goes.
type intakeReq struct {
	spec queue.Spec
	done chan intakeRes
}

type intakeRes struct {
	created queue.Created
	err     error
}

// intake stores the specs handed to create in groups.
type intake struct {
	st   *queue.Store
	reqs chan intakeReq
}

// newIntake starts the intake's loops; they end with ctx, after the
// requests already handed over.
func newIntake(ctx context.Context, st *queue.Store) *intake {
	in := &intake{st: st, reqs: make(chan intakeReq)}
	for range intakeLoops {
		go in.loop(ctx)
	}
	return in
}

// create stores sp and enqueues it, as Create of the spec alone would: the
// same result, the same error.
func (in *intake) create(ctx context.Context, sp queue.Spec) (queue.Created, error) {
	r := intakeReq{spec: sp, done: make(chan intakeRes, 1)}
	select {
	case in.reqs <- r:
	case <-ctx.Done():
		return queue.Created{}, ctx.Err()
	}
	res := <-r.done
	return res.created, res.err
}

// loop takes a request, and with it every one already waiting (up to
// intakeMax), and stores them in one transaction. When that fails, each
// is stored alone, so that one bad spec (a conflict, a missing --after)
// fails only its own request.
func (in *intake) loop(ctx context.Context) {
	group := make([]intakeReq, 0, intakeMax)
	specs := make([]queue.Spec, 0, intakeMax)
	for {
		group, specs = group[:0], specs[:0]
		select {
		case r := <-in.reqs:
			group = append(group, r)
		case <-ctx.Done():
			return
		}
	more:
		for len(group) < intakeMax {
			select {
			case r := <-in.reqs:
				group = append(group, r)
			default:
				break more
			}
		}
		for _, r := range group {
			specs = append(specs, r.spec)
		}
		// The requests' own contexts are not the group's: a sender gone
		// does not undo the others' tasks.
		wctx := context.WithoutCancel(ctx)
		res, err := in.st.Create(wctx, specs, queue.CreateOptions{Enqueue: true})
		if err == nil {
			for i, r := range group {
				r.done <- intakeRes{created: res[i]}
			}
			continue
		}
		if len(group) == 1 {
			group[0].done <- intakeRes{err: err}
			continue
		}
		for _, r := range group {
			res, err := in.st.Create(wctx, []queue.Spec{r.spec}, queue.CreateOptions{Enqueue: true})
			if err != nil {
				r.done <- intakeRes{err: err}
			} else {
				r.done <- intakeRes{created: res[0]}
			}
		}
	}
}
