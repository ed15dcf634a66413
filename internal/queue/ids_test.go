package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNewIDIsALowerCaseULID: ids are ULIDs in lower case, in creation
// order, and parse back to their time.
func TestNewIDIsALowerCaseULID(t *testing.T) {
	now := time.Date(2026, 11, 22, 17, 0, 0, 0, time.UTC)
	prev := ""
	for range 1000 {
		id := NewID(now)
		if len(id) != ulid.EncodedSize || strings.ToLower(id) != id {
			t.Fatalf("id %q is not a lower-case ULID", id)
		}
		u, err := ulid.ParseStrict(strings.ToUpper(id))
		if err != nil {
			t.Fatalf("id %q: %v", id, err)
		}
		if ulid.Time(u.Time()) != ulid.Time(ulid.Timestamp(now)) {
			t.Fatalf("id %q has time %v, want %v", id, ulid.Time(u.Time()), now)
		}
		if id <= prev {
			t.Fatalf("id %q does not sort after %q", id, prev)
		}
		prev = id
	}
}
