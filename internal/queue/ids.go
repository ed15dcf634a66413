package queue

import (
	"crypto/rand"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

var (
	idMu      sync.Mutex
	idEntropy = ulid.Monotonic(rand.Reader, 0)
)

// NewID returns a new task or run id: a ULID in lower case, so ids are
// unique across hosts (80 random bits), sort by creation time, and are
// easy to type as prefixes.
func NewID(t time.Time) string {
	idMu.Lock()
	defer idMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(t), idEntropy)
	if err != nil {
		// The monotonic reader overflowed within one millisecond; fall
		// back to fresh randomness.
		id = ulid.MustNew(ulid.Timestamp(t), rand.Reader)
	}
	var b [ulid.EncodedSize]byte
	_ = id.MarshalTextTo(b[:])
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b[:])
}
