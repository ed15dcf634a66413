package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"

	"github.com/cq-dev/cq/internal/store/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema is the sequence of migrations in migrations/, one file each,
// named NNNN_short_name.sql. The version table schema_migrations, in
// cq's schema, holds a row for each migration applied; the schema's
// version is the highest. Opening a store applies, in order, each
// migration above its version, each in its own transaction with its row,
// all under a session advisory lock on the schema's name, so concurrent
// openers take turns and each re-reads the version once it holds the
// lock. A version above the last migration was written by a newer cq:
// the schema is refused, untouched (docs/store.md, PostgreSQL).
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one numbered schema change: migrations/NNNN_name.sql.
type Migration = migrations.Migration

// schema is the embedded migrations.
var schema = migrations.New(migrationFS, "migrations")

// Migrations returns the embedded migrations in order of version.
func Migrations() []Migration { return schema.All() }

// LatestVersion is the schema version this build writes.
func LatestVersion() int { return schema.Latest() }

// versionTable is the DDL of the version table, made with the schema
// before the first migration.
const versionTable = `CREATE TABLE %s (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// querier is a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaState is what a schema holds, as far as migrating it goes.
type schemaState struct {
	exists    bool // the schema exists
	versioned bool // it has the version table
	version   int  // the highest version in it, 0 for none
	objects   int  // tables, views, sequences, indexes and functions in it
}

// readState reads the state of schema. A store that is up to date costs
// one statement.
func readState(ctx context.Context, q querier, schema string) (schemaState, error) {
	var st schemaState
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&st.version)
	if err == nil {
		st.exists, st.versioned = true, true
		return st, nil
	}
	if !isCode(err, "42P01", "3F000") { // undefined table, or schema
		return st, fmt.Errorf("read the schema version: %w", err)
	}
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1),
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
		+ (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)`,
		schema).Scan(&st.exists, &st.objects)
	if err != nil {
		return st, fmt.Errorf("read schema %s: %w", schema, err)
	}
	return st, nil
}

// refuse returns why a schema in state st cannot be opened by a cq that
// knows versions up to latest; nil when it can.
func (d *DB) refuse(st schemaState, latest int) error {
	switch {
	case st.version > latest:
		return fmt.Errorf("%w: schema %s of %s has version %d, this cq knows up to %d; upgrade cq", ErrFutureSchema, d.Schema, d.addr, st.version, latest)
	case st.exists && !st.versioned && st.objects > 0:
		return fmt.Errorf("%w: schema %s of %s holds other objects and no cq version table; give cq a schema of its own (schema=NAME in the URL)", ErrNotCq, d.Schema, d.addr)
	}
	return nil
}

// migrate brings d's schema to the last of ms, creating it if needed,
// and returns how many migrations it applied.
func (d *DB) migrate(ctx context.Context, ms []Migration) (applied int, err error) {
	latest := ms[len(ms)-1].Version
	st, err := readState(ctx, d.Pool, d.Schema)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.addr, err)
	}
	// Unlocked, the state is only a hint: the two statements of readState
	// may straddle another opener's migration (no version table yet, then
	// its tables), so whether the schema is another application's is
	// judged under the lock, below. A newer version is final.
	if st.version > latest {
		return 0, d.refuse(st, latest)
	}
	if st.version == latest {
		return 0, nil
	}
	c, err := d.Pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.addr, err)
	}
	defer func() {
		if err != nil {
			// The lock belongs to the session: closing it frees the lock
			// whatever state a failure left it in.
			_ = c.Hijack().Close(context.Background())
			return
		}
		c.Release()
	}()
	if err := lockMigrations(ctx, c, d.Schema); err != nil {
		return 0, fmt.Errorf("%s: take the migration lock: %w", d.addr, err)
	}
	// Another opener may have migrated while this one waited.
	if st, err = readState(ctx, c, d.Schema); err != nil {
		return 0, fmt.Errorf("%s: %w", d.addr, err)
	}
	if err := d.refuse(st, latest); err != nil {
		return 0, err
	}
	for _, m := range ms {
		if m.Version <= st.version {
			continue
		}
		if err := d.apply(ctx, c.Conn(), st, m); err != nil {
			return applied, fmt.Errorf("%s: schema %s: migration %d: %w", d.addr, d.Schema, m.Version, err)
		}
		st = schemaState{exists: true, versioned: true, version: m.Version}
		applied++
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('cq:migrate:' || $1, 0))`, d.Schema); err != nil {
		return applied, fmt.Errorf("%s: release the migration lock: %w", d.addr, err)
	}
	return applied, nil
}

// lockMigrations takes the session advisory lock of schema's migrations
// on c, waiting as long as ctx lets it: openers of one schema take turns,
// those of others do not wait. The lock is taken in a transaction only
// to lift the time limits for the wait; it outlives the transaction.
func lockMigrations(ctx context.Context, c *pgxpool.Conn, schema string) error {
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('cq:migrate:' || $1, 0))`, schema)
		return err
	})
}

// apply applies m, in a transaction that records its version, to a
// schema in state st: the schema and its version table are made first
// when missing.
func (d *DB) apply(ctx context.Context, c *pgx.Conn, st schemaState, m Migration) error {
	schema := pgx.Identifier{d.Schema}.Sanitize()
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		// A migration may rewrite a large table: no time limit. The
		// search_path is set here too, so that a migration's unqualified
		// names land in cq's schema whatever the session's setting.
		setup := `SET LOCAL statement_timeout = 0; SET LOCAL search_path = ` + schema
		if !st.exists {
			setup = `CREATE SCHEMA ` + schema + `; ` + setup
		}
		if !st.versioned {
			setup += `; ` + fmt.Sprintf(versionTable, pgx.Identifier{d.Schema, "schema_migrations"}.Sanitize())
		}
		if _, err := tx.Exec(ctx, setup); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{d.Schema, "schema_migrations"}.Sanitize()+` (version) VALUES ($1)`, m.Version)
		return err
	})
}

// isCode reports whether err is a server error of one of codes.
func isCode(err error, codes ...string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && slices.Contains(codes, pe.Code)
}
