package queue

// Recurring schedules (docs/schedules.md): a cron expression in a time
// zone and a task spec; each slot of the expression makes one task, whose
// id is the schedule's name and the slot's time, so that however many
// passes race over a slot (workers, heartbeats, hosts) it is made once.
// The slots' times come from internal/slots; what is stored, how slots
// are taken and what their events say is here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/slots"
	"github.com/cq-dev/cq/internal/store"
)

// The policies of a schedule.
const (
	CatchUpNone = "none" // missed slots are skipped; only a slot on time fires
	CatchUpLast = "last" // of the slots missed, the newest fires (default)
	CatchUpAll  = "all"  // every slot missed fires, oldest first

	OverlapSkip  = "skip"  // a slot whose previous task is not ended is skipped (default)
	OverlapQueue = "queue" // it is queued behind it, in the schedule's key lane
)

// OnTime is how late a slot may be taken and still count as on time for
// --catch-up none: the passes that take slots run at least every 30 s
// (workers) or every minute (cq heartbeat from cron).
const OnTime = time.Minute

// firePerPass bounds the tasks one schedule makes in one pass (catch-up
// all after a long gap); the next pass goes on.
const firePerPass = 1000

// ScheduleKeyPrefix makes the key lane of a schedule with --overlap queue
// whose spec names no key of its own.
const ScheduleKeyPrefix = "schedule:"

var scheduleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidScheduleName reports whether s may name a schedule: a task id's
// characters without ':' (its slots' ids add '@' and the time), up to 64.
func ValidScheduleName(s string) bool { return scheduleName.MatchString(s) }

// ScheduleDef is what cq schedule add stores.
type ScheduleDef struct {
	Name    string
	Expr    string
	TZ      string // "" for the host's zone
	Spec    Spec   // the template of its tasks: no id, no delay, no --at
	CatchUp string // "" for last
	Overlap string // "" for skip
}

// Schedule is a schedule as cq schedule ls and show print it.
type Schedule struct {
	Name     string  `json:"name"`
	Expr     string  `json:"schedule"`
	TZ       string  `json:"tz"`
	CatchUp  string  `json:"catch_up"`
	Overlap  string  `json:"overlap"`
	Paused   bool    `json:"paused"`
	NextSlot *string `json:"next_slot"`
	// LastSlot is the slot of its newest task made by a slot; LastTask
	// the newest task (a slot's or cq schedule run's) and LastState its
	// state (null once cleanup removed it).
	LastSlot  *string `json:"last_slot"`
	LastTask  *string `json:"last_task"`
	LastState *string `json:"last_state"`
	Spec      Spec    `json:"spec"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
	// Error says why its slots cannot be computed (a zone this host does
	// not know); none are taken meanwhile.
	Error *string `json:"error,omitempty"`
}

// SlotID is the id of the task of a schedule's slot: NAME@2026-11-27T10:00:00Z.
func SlotID(name string, slot time.Time) string {
	return name + "@" + slot.UTC().Format("2006-01-02T15:04:05Z")
}

// slotOfID is the slot of a task id SlotID made for name.
func slotOfID(name, id string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, name+"@")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse("2006-01-02T15:04:05Z", rest)
	return t, err == nil
}

// normalizeDef checks d and returns it with defaults filled in, its spec
// normalised, and its slots parsed.
func normalizeDef(d ScheduleDef) (ScheduleDef, *slots.Schedule, error) {
	if !ValidScheduleName(d.Name) {
		return d, nil, invalidf("invalid schedule name %q (want [A-Za-z0-9][A-Za-z0-9._-]{0,63})", d.Name)
	}
	p, err := slots.Parse(d.Expr, d.TZ)
	if err != nil {
		return d, nil, invalidf("%s", err.Error())
	}
	d.TZ = p.Zone()
	switch d.CatchUp {
	case "":
		d.CatchUp = CatchUpLast
	case CatchUpNone, CatchUpLast, CatchUpAll:
	default:
		return d, nil, invalidf("--catch-up %q: want none, last or all", d.CatchUp)
	}
	switch d.Overlap {
	case "":
		d.Overlap = OverlapSkip
	case OverlapSkip, OverlapQueue:
	default:
		return d, nil, invalidf("--overlap %q: want skip or queue", d.Overlap)
	}
	switch {
	case d.Spec.ID != "":
		return d, nil, invalidf("a schedule's tasks get their ids from its name and slot: --id is not taken")
	case d.Spec.Delay != "" || d.Spec.At != "":
		return d, nil, invalidf("a schedule's tasks are due at their slots: --delay and --at are not taken")
	case len(d.Spec.After) > 0:
		return d, nil, invalidf("a schedule's tasks cannot wait for other tasks: --after is not taken")
	}
	if d.Spec, err = d.Spec.Normalize(); err != nil {
		return d, nil, err
	}
	return d, p, nil
}

// ScheduleAdd stores a schedule; its first slot is the first after now.
// Adding a name again with the same definition changes nothing (added
// false); with another, it is a conflict unless replace, which replaces
// the definition (its slots start again after now; its pause and last
// task are kept).
func (s *Store) ScheduleAdd(ctx context.Context, d ScheduleDef, replace bool) (added bool, err error) {
	d, _, err = normalizeDef(d)
	if err != nil {
		return false, err
	}
	spec, err := json.Marshal(d.Spec)
	if err != nil {
		return false, err
	}
	err = s.write(ctx, func(tx store.Tx, now time.Time) error {
		ts := FormatTime(now)
		row := store.Schedule{Name: d.Name, Expr: d.Expr, TZ: d.TZ, Spec: string(spec), CatchUp: d.CatchUp, Overlap: d.Overlap,
			LastSlot: ts, CreatedAt: ts, UpdatedAt: ts}
		cur, err := tx.ScheduleGet(ctx, d.Name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if added, err = tx.ScheduleAdd(ctx, row); err != nil || !added {
				return err
			}
			return scheduleEvent(ctx, tx, "schedule.added", ts, d.Name, "", map[string]any{"schedule": d.Expr, "tz": d.TZ})
		case err != nil:
			return err
		}
		if cur.Expr == row.Expr && cur.TZ == row.TZ && cur.CatchUp == row.CatchUp && cur.Overlap == row.Overlap &&
			SameSpec(cur.Spec, d.Spec.Canonical()) {
			return nil
		}
		if !replace {
			return conflictf("schedule %s already exists with another definition (--replace replaces it)", d.Name)
		}
		if ok, err := tx.ScheduleReplace(ctx, row); err != nil || !ok {
			return err
		}
		added = true
		return scheduleEvent(ctx, tx, "schedule.added", ts, d.Name, "", map[string]any{"schedule": d.Expr, "tz": d.TZ, "replaced": true})
	})
	return added, err
}

// scheduleEvent writes an event of a schedule: data gets its name.
func scheduleEvent(ctx context.Context, tx store.Tx, kind, at, name, taskID string, data map[string]any) error {
	if data == nil {
		data = map[string]any{}
	}
	data["name"] = name
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return tx.EventAdd(ctx, store.Event{At: at, Kind: kind, TaskID: taskID, Data: string(b)})
}

// ScheduleRemove deletes a schedule; the tasks it made stay.
func (s *Store) ScheduleRemove(ctx context.Context, name string) error {
	return s.write(ctx, func(tx store.Tx, now time.Time) error {
		ok, err := tx.ScheduleDelete(ctx, name)
		if err != nil {
			return err
		}
		if !ok {
			return notFoundf("no schedule %q", name)
		}
		return scheduleEvent(ctx, tx, "schedule.removed", FormatTime(now), name, "", nil)
	})
}

// SchedulePause pauses (or resumes) a schedule: paused, its slots pass
// without tasks (none are made for them on resume). changed is false when
// it already was so.
func (s *Store) SchedulePause(ctx context.Context, name string, paused bool) (changed bool, err error) {
	err = s.write(ctx, func(tx store.Tx, now time.Time) error {
		ts := FormatTime(now)
		cur, err := tx.ScheduleGet(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("no schedule %q", name)
		}
		if err != nil {
			return err
		}
		if changed, err = tx.ScheduleSetPaused(ctx, name, paused, ts); err != nil || !changed {
			return err
		}
		kind := "schedule.paused"
		if !paused {
			kind = "schedule.resumed"
			// The slots that passed while paused are not due.
			if _, err := tx.ScheduleAdvance(ctx, name, cur.LastSlot, max(cur.LastSlot, ts), "", ts); err != nil {
				return err
			}
		}
		return scheduleEvent(ctx, tx, kind, ts, name, "", nil)
	})
	return changed, err
}

// ScheduleRun makes one task of a schedule now, outside its slots (cq
// schedule run), as a slot would (overlap aside): its id is
// NAME@run-TIME.
func (s *Store) ScheduleRun(ctx context.Context, name string) (Created, error) {
	var out Created
	err := s.write(ctx, func(tx store.Tx, now time.Time) error {
		cur, err := tx.ScheduleGet(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("no schedule %q", name)
		}
		if err != nil {
			return err
		}
		sp, err := slotSpec(cur, name+"@run-"+now.UTC().Format("20060102T150405.000Z"))
		if err != nil {
			return err
		}
		c := newCreator(tx, now)
		if out, err = c.create(ctx, sp, true); err != nil {
			return err
		}
		ts := FormatTime(now)
		if _, err := tx.ScheduleSetLastTask(ctx, name, out.ID, ts); err != nil {
			return err
		}
		return scheduleEvent(ctx, tx, "schedule.fired", ts, name, out.ID, map[string]any{"run": true})
	})
	return out, err
}

// slotSpec is the spec of a schedule's task of id id.
func slotSpec(row *store.Schedule, id string) (Spec, error) {
	var sp Spec
	if err := json.Unmarshal([]byte(row.Spec), &sp); err != nil {
		return sp, fmt.Errorf("schedule %s: stored spec: %w", row.Name, err)
	}
	sp.ID = id
	if row.Overlap == OverlapQueue && sp.Key == "" {
		sp.Key = ScheduleKeyPrefix + row.Name
	}
	return sp.Normalize()
}

// ScheduleGet reads one schedule as cq schedule show prints it.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*Schedule, error) {
	row, err := s.st.ScheduleGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundf("no schedule %q", name)
	}
	if err != nil {
		return nil, err
	}
	out, err := s.scheduleViews(ctx, []store.Schedule{*row})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// ScheduleList lists every schedule, by name.
func (s *Store) ScheduleList(ctx context.Context) ([]Schedule, error) {
	rows, err := s.st.ScheduleList(ctx)
	if err != nil {
		return nil, err
	}
	return s.scheduleViews(ctx, rows)
}

func (s *Store) scheduleViews(ctx context.Context, rows []store.Schedule) ([]Schedule, error) {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		if r.LastTask != "" {
			ids = append(ids, r.LastTask)
		}
	}
	states, err := s.TaskStatuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		v := Schedule{Name: r.Name, Expr: r.Expr, TZ: r.TZ, CatchUp: r.CatchUp, Overlap: r.Overlap, Paused: r.Paused,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
		if err := json.Unmarshal([]byte(r.Spec), &v.Spec); err != nil {
			return nil, fmt.Errorf("schedule %s: stored spec: %w", r.Name, err)
		}
		if p, err := slots.Parse(r.Expr, r.TZ); err != nil {
			v.Error = strp(err.Error())
		} else {
			next := FormatTime(p.Next(ParseStoredTime(r.LastSlot)))
			v.NextSlot = &next
		}
		if r.LastTask != "" {
			v.LastTask = strp(r.LastTask)
			if st, ok := states[r.LastTask]; ok {
				v.LastState = strp(st.State)
			}
			if t, ok := slotOfID(r.Name, r.LastTask); ok {
				v.LastSlot = strp(FormatTime(t))
			}
		}
		out[i] = v
	}
	return out, nil
}

// SchedulesFired is what one FireSchedules did.
type SchedulesFired struct {
	Fired   int // tasks made
	Skipped int // slots skipped (missed, or overlapping)
	// Next is the earliest slot still ahead of the schedules not paused
	// (zero when none): when a pass is next needed.
	Next time.Time
}

// FireSchedules takes every slot due of every schedule not paused, as
// their catch-up and overlap policies say: the maintenance pass's part
// (workers, cq heartbeat). Each schedule's slots are taken in one
// transaction that moves its last slot by compare-and-set: a pass that
// finds them taken by another does nothing.
func (s *Store) FireSchedules(ctx context.Context) (SchedulesFired, error) {
	var out SchedulesFired
	rows, err := s.st.ScheduleList(ctx)
	if err != nil {
		return out, err
	}
	var errs []error
	for _, r := range rows {
		if r.Paused {
			continue
		}
		p, err := slots.Parse(r.Expr, r.TZ)
		if err != nil {
			// A zone this host does not know: cq schedule ls says so.
			continue
		}
		now := s.now()
		due, more := p.Between(ParseStoredTime(r.LastSlot), now, firePerPass)
		if len(due) > 0 {
			f, k, err := s.fireSlots(ctx, &r, p, due, more, now)
			if err != nil {
				errs = append(errs, fmt.Errorf("schedule %s: %w", r.Name, err))
				continue
			}
			out.Fired += f
			out.Skipped += k
			if more && r.CatchUp == CatchUpAll {
				// The rest at the next pass, which is due at once.
				out.Next = now
				continue
			}
		}
		if n := p.Next(now); out.Next.IsZero() || n.Before(out.Next) {
			out.Next = n
		}
	}
	return out, errors.Join(errs...)
}

// fireSlots takes the slots due of schedule r (read outside the
// transaction), oldest first; more says slots after the last of due are
// due too.
func (s *Store) fireSlots(ctx context.Context, r *store.Schedule, p *slots.Schedule, due []time.Time, more bool, now time.Time) (fired, skipped int, err error) {
	last := due[len(due)-1]
	// extra counts the slots missed beyond those in due.
	extra := 0
	if more && r.CatchUp != CatchUpAll {
		// Only the newest slot due may fire: find it; the rest are
		// missed.
		for more {
			var next []time.Time
			next, more = p.Between(last, now, firePerPass)
			extra += len(next)
			if len(next) > 0 {
				last = next[len(next)-1]
			}
		}
		extra += len(due) - 1
		due = []time.Time{last}
	}
	var fire, missed []time.Time
	switch r.CatchUp {
	case CatchUpAll:
		fire = due
	case CatchUpLast:
		fire, missed = due[len(due)-1:], due[:len(due)-1]
	case CatchUpNone:
		if now.Sub(last) <= OnTime {
			fire, missed = due[len(due)-1:], due[:len(due)-1]
		} else {
			missed = due
		}
	}
	missedCount := extra + len(missed)
	err = s.st.Write(ctx, func(tx store.Tx) error {
		fired, skipped = 0, missedCount
		cur, err := tx.ScheduleGet(ctx, r.Name)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.LastSlot != r.LastSlot || cur.Paused || cur.Expr != r.Expr || cur.TZ != r.TZ {
			// Another pass took them, or the schedule changed.
			skipped = 0
			return nil
		}
		ts := FormatTime(now)
		// The slots are claimed first: the compare-and-set locks the
		// schedule's row, so that a pass racing this one (on PostgreSQL,
		// which reads without waiting) waits for this transaction, then
		// finds them taken and does nothing.
		ok, err := tx.ScheduleAdvance(ctx, cur.Name, r.LastSlot, FormatTime(due[len(due)-1]), "", ts)
		if err != nil {
			return err
		}
		if !ok {
			skipped = 0
			return nil
		}
		// Read again under the lock: its last task may have changed
		// (cq schedule run) while this transaction waited.
		if cur, err = tx.ScheduleGet(ctx, r.Name); err != nil {
			return err
		}
		if missedCount > 0 {
			data := map[string]any{"reason": "missed", "slots": missedCount, "catch_up": cur.CatchUp}
			if len(missed) > 0 {
				data["first"] = FormatTime(missed[0])
				data["last"] = FormatTime(missed[len(missed)-1])
			}
			if err := scheduleEvent(ctx, tx, "schedule.skipped", ts, cur.Name, "", data); err != nil {
				return err
			}
		}
		c := newCreator(tx, now)
		lastTask := cur.LastTask
		for _, slot := range fire {
			if cur.Overlap == OverlapSkip && lastTask != "" {
				prev, err := tx.TaskGet(ctx, lastTask)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if err == nil && !terminal(prev.State) {
					skipped++
					if err := scheduleEvent(ctx, tx, "schedule.skipped", ts, cur.Name, "", map[string]any{
						"reason": "overlap", "slot": FormatTime(slot), "running": lastTask}); err != nil {
						return err
					}
					continue
				}
			}
			sp, err := slotSpec(cur, SlotID(cur.Name, slot))
			if err != nil {
				return err
			}
			// A slot whose task cannot be made (its --unique key held)
			// is skipped, saying why, rather than hold back every later
			// slot.
			if err := tx.Savepoint("slot"); err != nil {
				return err
			}
			res, err := c.create(ctx, sp, true)
			if err != nil {
				var qe *Error
				if !errors.As(err, &qe) {
					return err
				}
				if err := tx.RollbackTo("slot"); err != nil {
					return err
				}
				c.forgetQueues()
				skipped++
				if err := scheduleEvent(ctx, tx, "schedule.skipped", ts, cur.Name, "", map[string]any{
					"reason": "refused", "slot": FormatTime(slot), "error": err.Error()}); err != nil {
					return err
				}
			} else {
				fired++
				lastTask = res.ID
				if err := scheduleEvent(ctx, tx, "schedule.fired", ts, cur.Name, res.ID, map[string]any{"slot": FormatTime(slot)}); err != nil {
					return err
				}
			}
			if err := tx.Release("slot"); err != nil {
				return err
			}
		}
		if lastTask != cur.LastTask {
			if _, err := tx.ScheduleSetLastTask(ctx, cur.Name, lastTask, ts); err != nil {
				return err
			}
		}
		return nil
	})
	return fired, skipped, err
}

// terminal reports whether a task state is an end (done, failed,
// cancelled).
func terminal(state string) bool {
	return state == TaskDone || state == TaskFailed || state == TaskCancelled
}

// scheduleFailures lists the schedules whose newest task failed, as
// "NAME (TASK)", for cq health's warning.
func scheduleFailures(ctx context.Context, q store.Reader) ([]string, error) {
	rows, err := q.ScheduleList(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range rows {
		if r.LastTask != "" {
			ids = append(ids, r.LastTask)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	failed := map[string]bool{}
	err = q.TaskStates(ctx, ids, func(id, state, _ string) {
		if state == TaskFailed {
			failed[id] = true
		}
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rows {
		if failed[r.LastTask] {
			out = append(out, r.Name+" ("+r.LastTask+")")
		}
	}
	return out, nil
}
