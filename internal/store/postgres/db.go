// Package postgres is cq's PostgreSQL backend, behind the interface of
// internal/store (docs/store.md, PostgreSQL). It checks a database URL
// against the parameters cq knows before pgx reads it, and merges a list
// of URLs into one configuration for primary-first failover (url.go);
// opens a pool of connections with the session settings cq relies on
// (open.go); and keeps cq's objects in a schema of their own, applying
// the embedded migrations under an advisory lock (migrate.go).
package postgres

import (
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is an open store: a pool of connections whose sessions search only
// cq's schema.
type DB struct {
	Pool *pgxpool.Pool
	// Schema holds cq's objects.
	Schema string
	addr   string
	// notifyChannel is the schema's notification channel, set at open.
	notifyChannel string
	// clock follows the server's clock (Store's Clock).
	clock *serverClock
}

// Addr is where the store is, without its password: its hosts, database
// and schema.
func (d *DB) Addr() string { return d.addr }

// Close closes the pool's connections, waiting for those in use to be
// given back.
func (d *DB) Close() error {
	d.Pool.Close()
	return nil
}
