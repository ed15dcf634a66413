// Package slots is the time math of recurring schedules: when the slots of
// a cron expression or an "@every" interval fall, in a given time zone,
// with daylight-saving days handled as Vixie cron handles them.
package slots

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed schedule: when its slots fall.
type Schedule struct {
	zone string
	loc  *time.Location

	// every is the interval of "@every" in seconds; 0 for a cron schedule.
	every int64

	// elapsed is set when the hour field is a wildcard: such a schedule
	// follows elapsed time, so spec (in loc) walks instants.
	elapsed bool
	spec    *cron.SpecSchedule

	// civil is the same schedule read in UTC, which has no daylight
	// saving: it walks wall-clock times for fixed-hour schedules.
	civil *cron.SpecSchedule
}

// parser takes the five standard fields and the descriptors: seconds
// fields are refused before it is reached.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads expr in zone tz (an IANA name such as "Europe/Berlin",
// "UTC", or "Local" for the host's zone; "" means "Local").
//
// expr is a five-field cron expression (minute hour day-of-month month
// day-of-week), a descriptor (@yearly @annually @monthly @weekly @daily
// @midnight @hourly), or "@every D" with D a Go duration of whole seconds,
// at least 1s. Seconds fields and CRON_TZ=/TZ= prefixes are refused: the
// zone is tz alone, so that one schedule has one zone.
func Parse(expr, tz string) (*Schedule, error) {
	e := strings.TrimSpace(expr)
	if strings.ContainsAny(e, "\r\n") {
		return nil, fmt.Errorf("schedule %q: want one line", expr)
	}
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if strings.HasPrefix(e, p) {
			return nil, fmt.Errorf("schedule %q: a %s prefix is not taken: the zone is given on its own", expr, p)
		}
	}
	fields := strings.Fields(e)
	if !strings.HasPrefix(e, "@") && len(fields) == 6 {
		return nil, fmt.Errorf("schedule %q: six fields (with seconds) are not taken: want minute hour day-of-month month day-of-week", expr)
	}
	if !strings.HasPrefix(e, "@") && len(fields) == 5 {
		// Cron takes 7 for Sunday as well as 0; robfig takes 0 only.
		fields[4] = sundayAsZero(fields[4])
		e = strings.Join(fields, " ")
	}
	parsed, err := parser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", expr, err)
	}

	zone, loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}
	s := &Schedule{zone: zone, loc: loc}

	switch p := parsed.(type) {
	case cron.ConstantDelaySchedule:
		// robfig rounds what it cannot do; a schedule that silently runs
		// at another pace than written is worse than an error.
		d, err := time.ParseDuration(strings.TrimPrefix(e, "@every "))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", expr, err)
		}
		if d < time.Second {
			return nil, fmt.Errorf("%s: want a duration of 1s or more", e)
		}
		if d%time.Second != 0 {
			return nil, fmt.Errorf("%s: want whole seconds", e)
		}
		s.every = int64(d / time.Second)
	case *cron.SpecSchedule:
		spec, civil := *p, *p
		spec.Location = loc
		civil.Location = time.UTC
		s.spec, s.civil = &spec, &civil
		// Vixie cron's test: an hour field that starts with "*" follows
		// elapsed time; "?" is robfig's spelling of "*".
		s.elapsed = e == "@hourly" || (len(fields) == 5 && strings.ContainsAny(fields[1][:1], "*?"))
		// Such as the 30th of February: robfig gives up after five years,
		// which from 2000 on cover two leap days.
		if civil.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, fmt.Errorf("schedule %q: matches no date", expr)
		}
	default:
		return nil, fmt.Errorf("schedule %q: not a schedule this package knows (%T)", expr, parsed)
	}
	return s, nil
}

// sundayAsZero rewrites the day-of-week items of field that name day 7
// (Sunday, as cron also writes it) with 0: "7" → "0", "5-7" → "5,6,0",
// "1-7/2" → "1,3,5,0". Anything else is left as it is, for the parser to
// take or refuse.
func sundayAsZero(field string) string {
	items := strings.Split(field, ",")
	for i, item := range items {
		rng, step, stepped := strings.Cut(item, "/")
		lo, hi, isRange := strings.Cut(rng, "-")
		if !isRange {
			if rng == "7" && !stepped {
				items[i] = "0"
			}
			continue
		}
		if hi != "7" {
			continue
		}
		a, err1 := strconv.Atoi(lo)
		n := 1
		var err2 error
		if stepped {
			n, err2 = strconv.Atoi(step)
		}
		if err1 != nil || err2 != nil || n < 1 || a < 0 || a > 7 {
			continue
		}
		var days []string
		for d := a; d <= 7; d += n {
			days = append(days, strconv.Itoa(d%7))
		}
		items[i] = strings.Join(days, ",")
	}
	return strings.Join(items, ",")
}

// loadZone loads tz. The name kept is the IANA name, also for the host's
// zone where it can be told, so that a stored schedule means the same on
// another host.
func loadZone(tz string) (string, *time.Location, error) {
	if tz == "" || tz == "Local" {
		name := hostZoneName()
		if name == "Local" {
			return name, time.Local, nil
		}
		if loc, err := time.LoadLocation(name); err == nil {
			return name, loc, nil
		}
		return "Local", time.Local, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return "", nil, fmt.Errorf("unknown time zone %q", tz)
	}
	return tz, loc, nil
}

// hostZoneName is the IANA name of the host's zone, read as the Go
// runtime reads the zone: $TZ, else /etc/localtime. "Local" when it has no
// name to be found.
func hostZoneName() string {
	tz, ok := os.LookupEnv("TZ")
	switch {
	case !ok:
		return zoneFromPath("/etc/localtime")
	case tz == "":
		return "UTC"
	}
	tz = strings.TrimPrefix(tz, ":")
	if strings.HasPrefix(tz, "/") {
		return zoneFromPath(tz)
	}
	if validZone(tz) {
		return tz
	}
	return "Local"
}

// zoneFromPath names the zone of a zone file by where it lies, or where
// it links to, under a zoneinfo folder.
func zoneFromPath(p string) string {
	cands := []string{p}
	if target, err := os.Readlink(p); err == nil {
		cands = append(cands, target)
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		cands = append(cands, real)
	}
	for _, c := range cands {
		const dir = "zoneinfo/"
		if i := strings.LastIndex(c, dir); i >= 0 && validZone(c[i+len(dir):]) {
			return c[i+len(dir):]
		}
	}
	return "Local"
}

// validZone reports whether name loads as a zone by name.
func validZone(name string) bool {
	if name == "" || name == "Local" {
		return false
	}
	_, err := time.LoadLocation(name)
	return err == nil
}

// Next is the first slot strictly after t (any location); returned in
// UTC, truncated to the second, as slots are stored. The zero time when
// the schedule has no slot left in reach.
func (s *Schedule) Next(t time.Time) time.Time {
	switch {
	case s.every > 0:
		return s.nextEvery(t)
	case s.elapsed:
		// robfig walks instants in the zone: a repeated hour comes twice,
		// a skipped one not at all. t is put in the zone first as robfig
		// reads a time.Local schedule in t's own location.
		at := s.spec.Next(t.In(s.loc))
		if at.IsZero() {
			return at
		}
		return at.UTC()
	default:
		return s.nextWall(t)
	}
}

// nextEvery is the next multiple of the interval since the Unix epoch:
// the same instants on every host, whenever asked.
func (s *Schedule) nextEvery(t time.Time) time.Time {
	sec := t.Unix() // floor: t.Unix() <= t
	q := sec / s.every
	if sec%s.every < 0 {
		q--
	}
	return time.Unix((q+1)*s.every, 0).UTC()
}

// nextWall walks matching wall-clock times from t's own and takes the
// first whose instant is after t: a time in a repeated hour maps to its
// first instant, so t in the second pass may skip some.
func (s *Schedule) nextWall(t time.Time) time.Time {
	c := civil(t.In(s.loc))
	for {
		c = s.civil.Next(c)
		if c.IsZero() {
			return c
		}
		if at := s.instant(c); at.After(t) {
			return at
		}
	}
}

// instant is the one instant a wall-clock time c (given as its fields in
// UTC) fires at in the zone: the earlier of two when the clock repeats it,
// the end of the gap when the clock skips it.
func (s *Schedule) instant(c time.Time) time.Time {
	u := c.Unix()
	// u less the offset at u is within a transition's size of the answer;
	// the offsets 3 h either side of that cover both sides of one.
	base := u - offset(u, s.loc)
	lo, hi := base-3*3600, base+3*3600
	var best time.Time
	for _, probe := range []int64{lo, hi} {
		at := time.Unix(u-offset(probe, s.loc), 0)
		if civil(at.In(s.loc)).Equal(c) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best.UTC()
	}
	// In a gap: the first instant of the new offset is the first valid
	// wall clock after it, and every skipped time of the day fires there.
	first := offset(lo, s.loc)
	if offset(hi, s.loc) == first {
		// Not one transition in reach (none known to the zone data);
		// let the time package pick.
		return time.Date(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), c.Second(), 0, s.loc).UTC()
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offset(mid, s.loc) == first {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0).UTC()
}

// offset is the zone's offset from UTC, in seconds, at Unix second u.
func offset(u int64, loc *time.Location) int64 {
	_, off := time.Unix(u, 0).In(loc).Zone()
	return int64(off)
}

// civil is t's wall clock to the second, written as a UTC time: UTC has no
// daylight saving, so robfig walks it as plain calendar time.
func civil(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// Between lists the slots in (after, until], oldest first, at most max of
// them (the oldest ones); more reports whether there were more than max,
// so that a catch-up can be bounded and still know it was cut.
func (s *Schedule) Between(after, until time.Time, max int) (slots []time.Time, more bool) {
	for at := s.Next(after); !at.IsZero() && !at.After(until); at = s.Next(at) {
		if len(slots) >= max {
			return slots, true
		}
		slots = append(slots, at)
	}
	return slots, false
}

// Zone is the zone's name as stored: the IANA name, with "Local" resolved
// to the host zone's name when it has one (from $TZ or /etc/localtime's
// link target), else "Local".
func (s *Schedule) Zone() string { return s.zone }
