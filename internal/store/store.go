// Package store is the seam between cq's domain and the database that
// keeps its tasks: one interface of named operations, each with typed
// parameters and rows, and no SQL crossing it. The domain (internal/queue)
// decides what changes: which state a task moves to, what its event says,
// which lane head follows. A backend package (internal/store/sqlite)
// decides how that is stored. docs/store.md describes the contract; the
// conformance suite in internal/store/storetest holds every backend to it.
//
// Conventions every operation keeps:
//   - Times are text in cq's stored format (RFC 3339 UTC with
//     milliseconds, fixed width: 2006-01-02T15:04:05.000Z), so that they
//     compare as text; "" stands for none (NULL).
//   - Optional text is "" for none, on the way in and out.
//   - An update of a task or run is a compare-and-set on the state it was
//     read in: it reports whether it applied, and changes nothing when
//     it did not.
//   - A write transaction (Store.Write) commits its changes and the events
//     recording them together, or none of them.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is what a read of one row returns when there is no such row.
var ErrNotFound = errors.New("not found")

// Store is one database holding cq's tasks.
type Store interface {
	// Reader reads outside a write transaction; each call is consistent
	// on its own.
	Reader
	// Write runs fn in one write transaction and commits it when fn
	// returns nil; writes of other processes wait or are waited for.
	Write(ctx context.Context, fn func(Tx) error) error
	// WriteWithin is Write that waits at most wait for another writer,
	// then returns ErrBusy having done nothing.
	WriteWithin(ctx context.Context, wait time.Duration, fn func(Tx) error) error

	Host
}

// Host is what commands and workers ask of a backend besides its
// operations.
type Host interface {
	// Addr is where the store is: a file path, or a URL. Host-local files
	// that belong to a store (the worker lock files) are named from it.
	Addr() string
	// CheckWritable reports whether the store can be written now,
	// writing nothing: ErrReadOnly when it cannot until the user acts.
	CheckWritable(ctx context.Context) error
	// ChangeWatch tells a follower (cq wait, cq events --follow) whether
	// the store changed since changed was last called; stop ends the
	// watch.
	ChangeWatch(ctx context.Context) (changed func() (bool, error), stop func(), err error)
	// Wakeups is, for a process that waits for work (a worker), a
	// channel that receives when another process may have changed the
	// store, until stop; nil when the backend has none to give (SQLite:
	// the worker watches the file's folder). It is a hint: the caller
	// keeps a poll for the wake-ups it may lose.
	Wakeups(ctx context.Context) (wake <-chan struct{}, stop func())
	// Clock is the clock of the times the store keeps, nil for the
	// host's own. A store that hosts share (PostgreSQL) gives its
	// server's, so that leases, schedules and retention agree across
	// hosts without their clocks being in step; leases are then judged on
	// it alone (no boot clock, see LeaseClock).
	Clock() func() time.Time
	// Exclusive takes the lock name for the whole store, if no other
	// process holds it, without waiting: ok false when one does. It is
	// held until release. SQLite: always ok (its store is on one host,
	// whose processes take turns with a file lock of their own).
	Exclusive(ctx context.Context, name string) (release func(), ok bool, err error)
	// Attend starts, for a long-lived writer (a worker), the upkeep the
	// backend wants from one, until stop; an error is worth a warning
	// (cq works without it, less well). SQLite: the store is held, so
	// that short commands leave the WAL to this process, and its WAL is
	// checkpointed in the background.
	Attend(ctx context.Context) (stop func(), err error)
	// Leave is called by a short command as it ends. SQLite: the WAL is
	// trimmed unless a long-lived writer holds the store.
	Leave(ctx context.Context)
	// Explain turns a failure of the store into words a user can act on,
	// naming the store, or returns err as it is.
	Explain(err error) error
	// Close closes the store's connections.
	Close() error
}

// Reader is every read.
type Reader interface {
	TaskReader
	QueueReader
	RunReader
	IntakeReader
	ViewReader
	UpkeepReader
	InteractReader
	ScheduleReader
}

// Tx is a write transaction: every read, every write, and savepoints.
type Tx interface {
	Reader
	TaskWriter
	QueueWriter
	EventWriter
	RunWriter
	IntakeWriter
	ViewWriter
	UpkeepWriter
	InteractWriter
	ScheduleWriter

	// Savepoint opens a savepoint; RollbackTo undoes the writes since it
	// (it stays open); Release closes it and those opened after it,
	// keeping their writes.
	Savepoint(name string) error
	RollbackTo(name string) error
	Release(name string) error
}

// Errors a backend returns for conditions the domain and the command line
// act on. A backend wraps its driver's error so that errors.Is finds these.
var (
	// ErrBusy: another writer held the store past the wait (WriteWithin).
	ErrBusy = errors.New("store busy")
	// ErrReadOnly: the store can be read but not written; the error says
	// where and what to check.
	ErrReadOnly = errors.New("store is read-only")
	// ErrFull: no space left for a write; nothing of it was stored.
	ErrFull = errors.New("no space left for the store")
	// ErrFutureSchema: the database was written by a newer cq; it is
	// refused and left untouched.
	ErrFutureSchema = errors.New("database schema is newer than this cq")
	// ErrUnsupported: the URL names a backend this build cannot use.
	ErrUnsupported = errors.New("unsupported database")
)
