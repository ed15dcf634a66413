package sqlite

import (
	"github.com/cq-dev/cq/internal/fsutil"
)

// holdersPath is the file on which a long-lived process that keeps the
// store open holds a shared flock (see Hold).
func holdersPath(dbPath string) string { return dbPath + "-holders" }

// Hold marks this process, until release, as one that keeps the store
// open for long (a worker): a shared flock on the store's -holders file
// (created 0600). While one is held, the next command to open the store
// has no WAL to read through (the holder keeps the WAL index valid) and
// the holder's own checkpoints keep the WAL in bounds, so TrimWAL leaves
// the WAL to it.
func (d *DB) Hold() (release func(), err error) {
	l, err := fsutil.OpenLock(holdersPath(d.Path))
	if err != nil {
		return nil, err
	}
	if err := l.RLock(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return func() { _ = l.Close() }, nil
}

// held reports whether some process holds the store (see Hold): its
// -holders file exists and an exclusive flock on it cannot be had at
// once. Unknown counts as no.
func held(dbPath string) bool {
	l, err := fsutil.OpenExistingLock(holdersPath(dbPath))
	if err != nil {
		return false
	}
	defer l.Close()
	ok, err := l.TryLock()
	return err == nil && !ok
}
