package store

import (
	"errors"
	"sync/atomic"
)

// FailColumns are the classes a TaskUpdate may spend a failure of (its
// FailClass), each with its count's column. A failure class number fc is
// 0 for none, else 1 + its index here.
var FailColumns = [...]struct{ Class, Col string }{{"other", "fails_other"}, {"transient", "fails_transient"}, {"timeout", "fails_timeout"}}

// TaskUpdateStatements keeps a backend's statement for each set of
// fields and failure class a TaskUpdate writes, built on first use: the
// same text each time, so that each connection prepares it once.
type TaskUpdateStatements struct {
	slots [int(TaskFieldsAll+1) * (len(FailColumns) + 1)]atomic.Pointer[string]
}

// For is u's statement, made by build(fields, failure class) the first
// time; an unknown FailClass is an error.
func (s *TaskUpdateStatements) For(u TaskUpdate, build func(TaskFields, int) string) (string, error) {
	fc := 0
	if u.Set&SpendFail != 0 {
		for i, c := range FailColumns {
			if c.Class == u.FailClass {
				fc = i + 1
			}
		}
		if fc == 0 {
			return "", errors.New("task update spends a failure of no known class: " + u.FailClass)
		}
	}
	slot := &s.slots[int(u.Set&TaskFieldsAll)*(len(FailColumns)+1)+fc]
	if q := slot.Load(); q != nil {
		return *q, nil
	}
	q := build(u.Set, fc)
	slot.Store(&q)
	return q, nil
}
