package store

import "context"

// Schedule is a recurring schedule (cq schedule add): when its slots fall
// (Expr in zone TZ), the task spec every slot's task gets, and how far
// its slots have been taken.
type Schedule struct {
	Name string
	Expr string // the cron expression, descriptor or @every, as given
	TZ   string // the zone's IANA name
	// Spec is the task spec of its tasks as JSON (cq enqueue --batch's
	// line, without an id).
	Spec    string
	CatchUp string // none, last or all
	Overlap string // skip or queue
	Paused  bool
	// LastSlot is the newest slot taken (fired or skipped); when none
	// has been, the time the schedule was added or replaced: slots after
	// it are due.
	LastSlot string
	// LastTask is the id of the newest task it made (a slot's or cq
	// schedule run's); "" for none.
	LastTask  string
	CreatedAt string
	UpdatedAt string
}

// ScheduleReader reads schedules.
type ScheduleReader interface {
	// ScheduleGet reads one schedule; ErrNotFound when there is none.
	ScheduleGet(ctx context.Context, name string) (*Schedule, error)
	// ScheduleList lists every schedule, by name.
	ScheduleList(ctx context.Context) ([]Schedule, error)
}

// ScheduleWriter changes schedules. Each change is a compare-and-set that
// reports whether it applied.
type ScheduleWriter interface {
	// ScheduleAdd stores s, unless a schedule of its name exists (false).
	ScheduleAdd(ctx context.Context, s Schedule) (bool, error)
	// ScheduleReplace sets the definition of the schedule s names (Expr,
	// TZ, Spec, CatchUp, Overlap, LastSlot, UpdatedAt), keeping Paused,
	// LastTask and CreatedAt; false when there is none.
	ScheduleReplace(ctx context.Context, s Schedule) (bool, error)
	// ScheduleAdvance moves a schedule's LastSlot from from to to, and
	// its LastTask to task unless task is ""; false (nothing changed)
	// when its LastSlot is not from: another process took those slots.
	ScheduleAdvance(ctx context.Context, name, from, to, task, at string) (bool, error)
	// ScheduleSetPaused pauses or resumes; false when there is no such
	// schedule or it already is so.
	ScheduleSetPaused(ctx context.Context, name string, paused bool, at string) (bool, error)
	// ScheduleSetLastTask records a task made outside the slots (cq
	// schedule run); false when there is no such schedule.
	ScheduleSetLastTask(ctx context.Context, name, task, at string) (bool, error)
	// ScheduleDelete removes a schedule (its tasks stay); false when there
	// is none.
	ScheduleDelete(ctx context.Context, name string) (bool, error)
}
