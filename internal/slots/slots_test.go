package slots

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	// Zone data in the test binary, for hosts without /usr/share/zoneinfo.
	_ "time/tzdata"
)

func mustParse(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, tz, err)
	}
	return s
}

// at reads an RFC 3339 time; tests write instants with their offsets so
// that the zone's wall clock can be read off the line.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad time in test: %v", err)
	}
	return v
}

func format(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, v := range ts {
		out[i] = v.Format(time.RFC3339)
	}
	return out
}

// wantSlots checks Between(after, until] against want, given in UTC.
func wantSlots(t *testing.T, s *Schedule, after, until string, want ...string) {
	t.Helper()
	got, more := s.Between(at(t, after), at(t, until), 1000)
	if more {
		t.Fatalf("Between(%s, %s): more slots than 1000", after, until)
	}
	if !slices.Equal(format(got), want) {
		t.Fatalf("Between(%s, %s] =\n  %v\nwant\n  %v", after, until, format(got), want)
	}
}

func TestParseValid(t *testing.T) {
	from := "2026-06-10T10:20:30Z" // a Wednesday
	for _, c := range []struct {
		expr, tz, want string
	}{
		{"* * * * *", "UTC", "2026-06-10T10:21:00Z"},
		{"  */15 * * * *  ", "UTC", "2026-06-10T10:30:00Z"},
		{"0 9-17 * * 1-5", "UTC", "2026-06-10T11:00:00Z"},
		{"0 0 1,15 * *", "UTC", "2026-06-15T00:00:00Z"},
		{"30 6 * jan-mar,jul mon,sun", "UTC", "2026-07-05T06:30:00Z"},
		{"0 12 * * SAT", "UTC", "2026-06-13T12:00:00Z"},
		{"5 4 * * 0", "UTC", "2026-06-14T04:05:00Z"},
		{"0 8 * * *", "Europe/Berlin", "2026-06-11T06:00:00Z"},
		{"0 8 * * *", "Asia/Kolkata", "2026-06-11T02:30:00Z"},
		{"@yearly", "UTC", "2027-01-01T00:00:00Z"},
		{"@annually", "Europe/Berlin", "2026-12-31T23:00:00Z"},
		{"@monthly", "UTC", "2026-07-01T00:00:00Z"},
		{"@weekly", "UTC", "2026-06-14T00:00:00Z"},
		{"@daily", "America/New_York", "2026-06-11T04:00:00Z"},
		{"@midnight", "UTC", "2026-06-11T00:00:00Z"},
		{"@hourly", "Asia/Kolkata", "2026-06-10T10:30:00Z"},
		{"@every 1s", "UTC", "2026-06-10T10:20:31Z"},
		{"@every 90s", "UTC", "2026-06-10T10:21:00Z"},
		{"@every 7m", "UTC", "2026-06-10T10:21:00Z"},
		{"@every 1h30m", "Europe/Berlin", "2026-06-10T10:30:00Z"},
		{"@every 24h", "Asia/Kolkata", "2026-06-11T00:00:00Z"},
	} {
		s := mustParse(t, c.expr, c.tz)
		if got := s.Next(at(t, from)).Format(time.RFC3339); got != c.want {
			t.Errorf("Parse(%q, %q).Next(%s) = %s, want %s", c.expr, c.tz, from, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		expr, tz, want string
	}{
		{"61 * * * *", "UTC", `schedule "61 * * * *": end of range (61) above maximum (59): 61`},
		{"0 24 * * *", "UTC", `end of range (24) above maximum (23)`},
		{"0 0 0 * *", "UTC", `beginning of range (0) below minimum (1)`},
		{"0 0 * 13 *", "UTC", `end of range (13) above maximum (12)`},
		{"0 0 * * mon-sun", "UTC", `beyond end of range`},
		{"0 0 * * funday", "UTC", `failed to parse int from funday`},
		{"* * * *", "UTC", `schedule "* * * *": expected exactly 5 fields, found 4`},
		{"0 0 * * * * *", "UTC", `expected exactly 5 fields, found 7`},
		{"0 0 0 * * *", "UTC", `schedule "0 0 0 * * *": six fields (with seconds) are not taken`},
		{"CRON_TZ=UTC 0 * * * *", "UTC", `a CRON_TZ= prefix is not taken`},
		{"TZ=Europe/Berlin 0 * * * *", "UTC", `a TZ= prefix is not taken`},
		{"", "UTC", `schedule "": empty spec string`},
		{"0 0 * * *\n0 1 * * *", "UTC", `want one line`},
		{"@fortnightly", "UTC", `unrecognized descriptor: @fortnightly`},
		{"@every", "UTC", `unrecognized descriptor: @every`},
		{"@every soon", "UTC", `failed to parse duration @every soon`},
		{"@every 0s", "UTC", `@every 0s: want a duration of 1s or more`},
		{"@every 500ms", "UTC", `@every 500ms: want a duration of 1s or more`},
		{"@every -1m", "UTC", `@every -1m: want a duration of 1s or more`},
		{"@every 1500ms", "UTC", `@every 1500ms: want whole seconds`},
		{"0 0 30 2 *", "UTC", `schedule "0 0 30 2 *": matches no date`},
		{"0 0 31 4,6,9,11 *", "UTC", `matches no date`},
		{"0 0 * * *", "Mars/Base", `unknown time zone "Mars/Base"`},
		{"@every 1h", "../etc/passwd", `unknown time zone "../etc/passwd"`},
	} {
		_, err := Parse(c.expr, c.tz)
		if err == nil {
			t.Errorf("Parse(%q, %q) = nil error, want %q", c.expr, c.tz, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q) = %q, want it to hold %q", c.expr, c.tz, err, c.want)
		}
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("Parse(%q, %q) = %q: more than one line", c.expr, c.tz, err)
		}
	}
}

func TestEveryMinuteForAnHour(t *testing.T) {
	s := mustParse(t, "* * * * *", "Europe/Berlin")
	got, more := s.Between(at(t, "2026-06-10T10:00:00Z"), at(t, "2026-06-10T11:00:00Z"), 100)
	if more || len(got) != 60 {
		t.Fatalf("got %d slots (more %v), want 60", len(got), more)
	}
	for i, v := range got {
		want := at(t, "2026-06-10T10:00:00Z").Add(time.Duration(i+1) * time.Minute)
		if !v.Equal(want) || v.Location() != time.UTC {
			t.Fatalf("slot %d = %v, want %v in UTC", i, v, want)
		}
	}
}

func TestEveryIsAlignedOnTheEpoch(t *testing.T) {
	s := mustParse(t, "@every 90s", "Europe/Berlin")
	after := at(t, "2026-06-10T10:00:07Z").Add(123 * time.Millisecond)
	got, _ := s.Between(after, after.Add(15*time.Minute), 100)
	if len(got) != 10 {
		t.Fatalf("got %d slots in 15 minutes, want 10", len(got))
	}
	if first := got[0]; first.Sub(after) > 90*time.Second || !first.After(after) {
		t.Fatalf("first slot %v is not the next 90 s mark after %v", first, after)
	}
	for i, v := range got {
		if v.Unix()%90 != 0 || v.Nanosecond() != 0 {
			t.Fatalf("slot %v is not on a 90 s mark since the epoch", v)
		}
		if i > 0 && v.Sub(got[i-1]) != 90*time.Second {
			t.Fatalf("slots %v and %v are not 90 s apart", got[i-1], v)
		}
	}

	// An hour is the top of each UTC hour, whatever the zone's offset.
	h := mustParse(t, "@every 1h", "Asia/Kolkata")
	wantSlots(t, h, "2026-06-10T10:20:00+05:30", "2026-06-10T08:00:00Z",
		"2026-06-10T05:00:00Z", "2026-06-10T06:00:00Z", "2026-06-10T07:00:00Z", "2026-06-10T08:00:00Z")

	// Asked from anywhere, the slots are the same instants.
	want := at(t, "2026-06-10T12:00:00Z")
	for _, from := range []string{"2026-06-10T11:00:00Z", "2026-06-10T11:00:01Z", "2026-06-10T11:59:59Z", "2026-06-10T17:29:59+05:30"} {
		if got := h.Next(at(t, from)); !got.Equal(want) {
			t.Errorf("Next(%s) = %v, want %v", from, got, want)
		}
	}
	// Every 7 s from afters that differ by less than 7 s meets on one grid.
	seven := mustParse(t, "@every 7s", "UTC")
	var grid []time.Time
	for off := range 7 {
		after := at(t, "2026-06-10T10:00:00Z").Add(time.Duration(off) * time.Second)
		got, _ := seven.Between(after, at(t, "2026-06-10T10:05:00Z"), 100)
		if len(got) < 40 {
			t.Fatalf("from +%ds: %d slots", off, len(got))
		}
		tail := got[len(got)-40:]
		if grid == nil {
			grid = tail
		} else if !slices.EqualFunc(grid, tail, time.Time.Equal) {
			t.Fatalf("from +%ds the slots are %v, from +0s %v", off, format(tail), format(grid))
		}
	}
	// Before the epoch too, and on a mark Next moves on.
	if got := seven.Next(time.Unix(-10, 0)); got.Unix() != -7 {
		t.Errorf("Next(-10 s) = %d, want -7", got.Unix())
	}
	if got := seven.Next(time.Unix(14, 0)); got.Unix() != 21 {
		t.Errorf("Next(14 s) = %d, want 21", got.Unix())
	}
}

func TestBerlinSpringForward(t *testing.T) {
	// 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
	daily := mustParse(t, "30 2 * * *", "Europe/Berlin")
	wantSlots(t, daily, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z",
		"2026-03-28T01:30:00Z", // 02:30 CET
		"2026-03-29T01:00:00Z", // no 02:30: 03:00 CEST, once
		"2026-03-30T00:30:00Z", // 02:30 CEST
	)

	half := mustParse(t, "*/30 1-3 * * *", "Europe/Berlin")
	wantSlots(t, half, "2026-03-29T00:00:00+01:00", "2026-03-29T12:00:00+02:00",
		"2026-03-29T00:00:00Z", // 01:00 CET
		"2026-03-29T00:30:00Z", // 01:30 CET
		"2026-03-29T01:00:00Z", // 02:00, 02:30 and 03:00 at 03:00 CEST
		"2026-03-29T01:30:00Z", // 03:30 CEST
	)
	// From inside the collapsed instant on, the skipped times do not come again.
	if got := half.Next(at(t, "2026-03-29T01:00:00Z")); !got.Equal(at(t, "2026-03-29T01:30:00Z")) {
		t.Errorf("Next(03:00 CEST) = %v, want 03:30 CEST", got)
	}

	hourly := mustParse(t, "0 * * * *", "Europe/Berlin")
	got, _ := hourly.Between(at(t, "2026-03-28T23:00:00Z"), at(t, "2026-03-29T22:00:00Z"), 100)
	if len(got) != 23 {
		t.Fatalf("hourly on the short day: %d slots, want 23: %v", len(got), format(got))
	}
	for _, v := range got {
		if v.In(daily.loc).Hour() == 2 {
			t.Fatalf("hourly fired at %v, a 02:00 that does not exist", v)
		}
	}
	wantSlots(t, hourly, "2026-03-28T23:30:00Z", "2026-03-29T02:00:00Z",
		"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z")
}

func TestBerlinFallBack(t *testing.T) {
	// 2026-10-25: 03:00 CEST (01:00Z) becomes 02:00 CET.
	daily := mustParse(t, "30 2 * * *", "Europe/Berlin")
	wantSlots(t, daily, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z",
		"2026-10-25T00:30:00Z", // 02:30 CEST, the first of two
		"2026-10-26T01:30:00Z", // 02:30 CET
	)
	for _, c := range []struct{ from, want string }{
		{"2026-10-25T00:10:00Z", "2026-10-25T00:30:00Z"}, // 02:10 CEST
		{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}, // on the slot
		{"2026-10-25T00:50:00Z", "2026-10-26T01:30:00Z"}, // 02:50 CEST
		{"2026-10-25T01:10:00Z", "2026-10-26T01:30:00Z"}, // 02:10 CET: 02:30 has been
		{"2026-10-25T01:40:00Z", "2026-10-26T01:30:00Z"}, // 02:40 CET
	} {
		if got := daily.Next(at(t, c.from)); !got.Equal(at(t, c.want)) {
			t.Errorf("Next(%s) = %v, want %s", c.from, got, c.want)
		}
	}

	hourly := mustParse(t, "0 * * * *", "Europe/Berlin")
	wantSlots(t, hourly, "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z",
		"2026-10-25T00:00:00Z", // 02:00 CEST
		"2026-10-25T01:00:00Z", // 02:00 CET
		"2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z")
	got, _ := hourly.Between(at(t, "2026-10-24T22:00:00Z"), at(t, "2026-10-25T23:00:00Z"), 100)
	if len(got) != 25 {
		t.Fatalf("hourly on the long day: %d slots, want 25", len(got))
	}

	// A fixed hour with every minute fires each minute of 02:xx once.
	minutes := mustParse(t, "* 2 * * *", "Europe/Berlin")
	got, _ = minutes.Between(at(t, "2026-10-24T22:00:00Z"), at(t, "2026-10-25T23:00:00Z"), 1000)
	if len(got) != 60 || !got[0].Equal(at(t, "2026-10-25T00:00:00Z")) || !got[59].Equal(at(t, "2026-10-25T00:59:00Z")) {
		t.Fatalf("* 2 * * * on the long day: %d slots, %v … %v", len(got), got[0], got[len(got)-1])
	}
}

func TestNewYork(t *testing.T) {
	// 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
	wantSlots(t, mustParse(t, "30 2 * * *", "America/New_York"), "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
		"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z")
	// 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z); 01:30 comes twice.
	wantSlots(t, mustParse(t, "30 1 * * *", "America/New_York"), "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z",
		"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z")
}

func TestLordHoweHalfHourShift(t *testing.T) {
	// 2026-04-05: 02:00 +11 becomes 01:30 +10:30 (15:00Z); 01:30–02:00 twice.
	wantSlots(t, mustParse(t, "45 1 * * *", "Australia/Lord_Howe"), "2026-04-03T12:00:00Z", "2026-04-05T18:00:00Z",
		"2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z")
	// 2026-10-04: 02:00 +10:30 becomes 02:30 +11 (15:30Z); 02:15 is skipped.
	wantSlots(t, mustParse(t, "15 2 * * *", "Australia/Lord_Howe"), "2026-10-02T12:00:00Z", "2026-10-04T18:00:00Z",
		"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z")
	// Hourly follows elapsed time: the skipped half hour is not made up.
	wantSlots(t, mustParse(t, "0 * * * *", "Australia/Lord_Howe"), "2026-10-03T14:00:00Z", "2026-10-03T17:00:00Z",
		"2026-10-03T14:30:00Z", // 01:00 +10:30
		"2026-10-03T16:00:00Z", // 03:00 +11
		"2026-10-03T17:00:00Z")
}

func TestMidnightInAGap(t *testing.T) {
	// America/Santiago skips 2026-09-06 00:00–01:00 (04:00Z).
	wantSlots(t, mustParse(t, "@daily", "America/Santiago"), "2026-09-04T12:00:00Z", "2026-09-07T12:00:00Z",
		"2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z")
}

func TestFixedHoursOverAYear(t *testing.T) {
	after, until := at(t, "2026-01-01T00:00:00+01:00"), at(t, "2027-01-01T00:00:00+01:00")
	for _, c := range []struct {
		expr string
		want int
	}{
		{"30 2 * * *", 365},
		{"@daily", 365},
		{"@weekly", 52},
		{"@monthly", 12},
		{"@yearly", 1},
		{"0 * * * *", 8760},
		{"0 9-17 * * 1-5", 261 * 9},
	} {
		got, more := mustParse(t, c.expr, "Europe/Berlin").Between(after, until, 10000)
		if more || len(got) != c.want {
			t.Errorf("%q over 2026: %d slots (more %v), want %d", c.expr, len(got), more, c.want)
		}
		for i := 1; i < len(got); i++ {
			if !got[i].After(got[i-1]) {
				t.Fatalf("%q: slot %v after %v", c.expr, got[i], got[i-1])
			}
		}
	}
}

func TestNextIsStrictlyAfter(t *testing.T) {
	for _, c := range []struct{ expr, tz, from, want string }{
		{"0 12 * * *", "UTC", "2026-06-10T12:00:00Z", "2026-06-11T12:00:00Z"},
		{"0 * * * *", "Europe/Berlin", "2026-06-10T12:00:00Z", "2026-06-10T13:00:00Z"},
		{"@every 1m", "UTC", "2026-06-10T12:00:00Z", "2026-06-10T12:01:00Z"},
	} {
		s := mustParse(t, c.expr, c.tz)
		from := at(t, c.from)
		if got := s.Next(from); !got.Equal(at(t, c.want)) {
			t.Errorf("%q: Next(%s) = %v, want %s", c.expr, c.from, got, c.want)
		}
		// A fraction past a slot is past it.
		if got := s.Next(from.Add(-time.Nanosecond)); !got.Equal(from) {
			t.Errorf("%q: Next(%s less 1 ns) = %v, want the slot itself", c.expr, c.from, got)
		}
		// Any location in, UTC to the second out.
		tokyo, _ := time.LoadLocation("Asia/Tokyo")
		got := s.Next(from.Add(500 * time.Millisecond).In(tokyo))
		if !got.Equal(at(t, c.want)) || got.Location() != time.UTC || got.Nanosecond() != 0 {
			t.Errorf("%q: Next in Tokyo = %v, want %s in UTC", c.expr, got, c.want)
		}
	}
}

func TestBetweenBounds(t *testing.T) {
	s := mustParse(t, "0 * * * *", "UTC")
	after, until := at(t, "2026-06-10T10:00:00Z"), at(t, "2026-06-10T15:00:00Z")
	all := []string{"2026-06-10T11:00:00Z", "2026-06-10T12:00:00Z", "2026-06-10T13:00:00Z", "2026-06-10T14:00:00Z", "2026-06-10T15:00:00Z"}
	for _, c := range []struct {
		max      int
		want     []string
		wantMore bool
	}{
		{10, all, false},
		{5, all, false},
		{4, all[:4], true},
		{1, all[:1], true},
		{0, nil, true},
		{-1, nil, true},
	} {
		got, more := s.Between(after, until, c.max)
		if !slices.Equal(format(got), c.want) || more != c.wantMore {
			t.Errorf("max %d: %v, more %v; want %v, more %v", c.max, format(got), more, c.want, c.wantMore)
		}
	}
	for _, c := range []struct{ after, until string }{
		{"2026-06-10T10:00:00Z", "2026-06-10T10:59:59Z"}, // no slot in it
		{"2026-06-10T11:00:00Z", "2026-06-10T11:00:00Z"}, // empty
		{"2026-06-10T12:00:00Z", "2026-06-10T11:00:00Z"}, // backwards
	} {
		if got, more := s.Between(at(t, c.after), at(t, c.until), 10); len(got) != 0 || more {
			t.Errorf("Between(%s, %s] = %v, more %v; want none", c.after, c.until, format(got), more)
		}
	}
}

func TestZone(t *testing.T) {
	for _, tz := range []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"} {
		if got := mustParse(t, "@daily", tz).Zone(); got != tz {
			t.Errorf("Zone() for %q = %q", tz, got)
		}
	}
	for _, c := range []struct{ env, want string }{
		{"Europe/Berlin", "Europe/Berlin"},
		{":America/New_York", "America/New_York"},
		{"", "UTC"},
		{"CET-1CEST,M3.5.0,M10.5.0/3", "Local"},
		{"/no/such/zoneinfo/file", "Local"},
	} {
		t.Setenv("TZ", c.env)
		for _, tz := range []string{"", "Local"} {
			if got := mustParse(t, "@daily", tz).Zone(); got != c.want {
				t.Errorf("TZ=%q: Zone() for %q = %q, want %q", c.env, tz, got, c.want)
			}
		}
	}
	// A Local resolved to a name computes in that zone.
	t.Setenv("TZ", "Europe/Berlin")
	s := mustParse(t, "30 2 * * *", "Local")
	if got := s.Next(at(t, "2026-03-28T12:00:00Z")); !got.Equal(at(t, "2026-03-29T01:00:00Z")) {
		t.Errorf("Local as Europe/Berlin: Next = %v", got)
	}
}

func TestZoneFromPath(t *testing.T) {
	dir := t.TempDir()
	zi := filepath.Join(dir, "zoneinfo", "Europe")
	if err := os.MkdirAll(zi, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(zi, "Berlin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "localtime")
	if err := os.Symlink(filepath.Join(zi, "Berlin"), link); err != nil {
		t.Fatal(err)
	}
	if got := zoneFromPath(link); got != "Europe/Berlin" {
		t.Errorf("zoneFromPath(link to …/zoneinfo/Europe/Berlin) = %q", got)
	}
	if got := zoneFromPath(filepath.Join(dir, "missing")); got != "Local" {
		t.Errorf("zoneFromPath(missing) = %q, want Local", got)
	}
	t.Setenv("TZ", link)
	if got := mustParse(t, "@daily", "").Zone(); got != "Europe/Berlin" {
		t.Errorf("TZ=%s: Zone() = %q", link, got)
	}
}

// TestAgainstAMinuteByMinuteWalk checks the slots around each transition
// of 2026 against a plain walk of every minute (all these zones keep
// whole-minute offsets): a wildcard-hour schedule fires at each instant
// whose wall clock matches; a fixed-hour one at the first instant of each
// matching wall clock, and once at the end of a gap that skipped any.
func TestAgainstAMinuteByMinuteWalk(t *testing.T) {
	exprs := []string{
		"30 2 * * *", "*/30 1-3 * * *", "15 0-3 * * *", "45 1 * * *", "0 23 * * *",
		"* 2 * * *", "@daily", "0 * * * *", "*/20 * * * *", "30 */2 * * *",
	}
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		var transitions []time.Time
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); ; {
			_, end := at.ZoneBounds()
			if end.IsZero() || end.Year() > 2026 {
				break
			}
			transitions = append(transitions, end)
			at = end
		}
		if len(transitions) != 2 {
			t.Fatalf("%s: %d transitions in 2026, want 2", zone, len(transitions))
		}
		for _, expr := range exprs {
			s := mustParse(t, expr, zone)
			matches := func(c time.Time) bool { return s.civil.Next(c.Add(-time.Second)).Equal(c) }
			for _, tr := range transitions {
				after, until := tr.Add(-48*time.Hour), tr.Add(48*time.Hour)
				var want []string
				seen := map[time.Time]bool{}
				for m := after.Add(time.Minute); !m.After(until); m = m.Add(time.Minute) {
					w, p := civil(m.In(loc)), civil(m.Add(-time.Minute).In(loc))
					fire := matches(w)
					if !s.elapsed {
						fire = fire && !seen[w]
						for c := p.Add(time.Minute); c.Before(w); c = c.Add(time.Minute) {
							fire = fire || matches(c)
						}
					}
					seen[w] = true
					if fire {
						want = append(want, m.UTC().Format(time.RFC3339))
					}
				}
				got, more := s.Between(after, until, 10000)
				if more || !slices.Equal(format(got), want) {
					t.Errorf("%s %q around %v:\n got %v\nwant %v", zone, expr, tr.UTC(), format(got), want)
				}
			}
		}
	}
}

// TestSundayAsSeven: day 7 is Sunday, as in cron, alone, ending a range
// or a stepped range.
func TestSundayAsSeven(t *testing.T) {
	after := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) // a Monday
	for expr, want := range map[string]string{
		"0 9 * * 7":     "2026-11-29T09:00:00Z",
		"0 9 * * 6-7":   "2026-11-28T09:00:00Z",
		"0 9 * * 7,1":   "2026-11-29T09:00:00Z",
		"0 9 * * 0":     "2026-11-29T09:00:00Z",
		"0 9 * * 2-7/5": "2026-11-24T09:00:00Z", // 2 and 7
	} {
		s, err := Parse(expr, "UTC")
		if err != nil {
			t.Errorf("Parse(%q): %v", expr, err)
			continue
		}
		if got := s.Next(after).Format(time.RFC3339); got != want {
			t.Errorf("%q: Next = %s, want %s", expr, got, want)
		}
	}
	s, err := Parse("0 9 * * 2-7/5", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)).Format(time.RFC3339); got != "2026-11-29T09:00:00Z" {
		t.Errorf("2-7/5 after Tuesday: %s, want Sunday", got)
	}
	if _, err := Parse("0 9 * * 8", "UTC"); err == nil {
		t.Error("day 8 taken")
	}
}

// TestDayFieldsEither: with both day fields restricted, a day matching
// either counts, as in cron.
func TestDayFieldsEither(t *testing.T) {
	s, err := Parse("0 9 1 * 1", "UTC") // the 1st, or a Monday
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC) // a Tuesday
	var got []string
	for range 3 {
		after = s.Next(after)
		got = append(got, after.Format("2006-01-02"))
	}
	if want := []string{"2026-11-30", "2026-12-01", "2026-12-07"}; !slices.Equal(got, want) {
		t.Errorf("slots %v, want %v", got, want)
	}
}
