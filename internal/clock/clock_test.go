package clock

import (
	"runtime"
	"testing"
	"time"
)

func TestBootReadsTheBootClock(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the boot id is read on Linux only")
	}
	a := Boot()
	if len(a.ID) != 36 || a.Since <= 0 {
		t.Fatalf("Boot() = %+v, want a 36-character boot id and a positive time since boot", a)
	}
	b := Boot()
	if b.ID != a.ID || b.Since < a.Since {
		t.Fatalf("Boot() went from %+v to %+v: another id, or backwards", a, b)
	}
}

func TestSetWall(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	SetWall(func() time.Time { return at })
	t.Cleanup(func() { SetWall(nil) })
	if got := Wall(); !got.Equal(at) {
		t.Fatalf("Wall() = %v after SetWall, want %v", got, at)
	}
	SetWall(nil)
	if got := Wall(); time.Since(got) > time.Minute || time.Since(got) < -time.Minute {
		t.Fatalf("Wall() = %v after SetWall(nil), want about now", got)
	}
}

func TestFollowingMovesWithWall(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	boot := Following(func() time.Time { return now })
	a := boot()
	now = now.Add(90 * time.Second)
	if b := boot(); b.ID != a.ID || b.Since-a.Since != 90*time.Second {
		t.Fatalf("after 90 s of wall time the boot clock went from %+v to %+v", a, b)
	}
}
