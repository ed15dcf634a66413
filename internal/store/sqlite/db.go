// Package sqlite is cq's SQLite backend, behind the interface of
// internal/store (docs/store.md). It opens the store's file privately, in
// WAL mode (open.go), applies the embedded migrations (migrate.go), runs
// write transactions on one connection with batched inserts and
// savepoints (tx.go, batch.go), keeps the WAL in bounds (checkpoint.go,
// hold.go), and implements the store's operations in SQL (store.go and a
// file per area: tasks.go, queues.go, events.go, …).
package sqlite

import (
	"database/sql"
	"sync"
)

// DB is an open store. Reads go straight to SQL (autocommit, no lock);
// writes go through Write, which serialises them inside this process so
// that its goroutines queue on a mutex instead of SQLite's busy handler.
type DB struct {
	// reads are the store's reads (store.Reader) on the pool.
	reads
	SQL  *sql.DB
	Path string
	mu   sync.Mutex
	// wconn is the connection every Write uses (under mu).
	wconn *sql.Conn
	// commits counts this process's commits (under mu); ckpt, when set
	// (BackgroundCheckpoints), is told every ckptEveryCommits of them.
	commits int
	ckpt    chan struct{}
}

// Close closes the pool. Short-lived commands may skip it: leaving the
// connection open at exit keeps the WAL file for the next call instead of
// checkpointing and deleting it every time.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.wconn != nil {
		_ = d.wconn.Close()
		d.wconn = nil
	}
	d.mu.Unlock()
	return d.SQL.Close()
}
