package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/cq-dev/cq/internal/store/migrations"
)

// The schema is the sequence of migrations in migrations/, one file each,
// named NNNN_short_name.sql. Migration N is applied once, in order, to a
// store whose PRAGMA user_version is below N, in the transaction that
// then sets user_version to N. A store whose user_version is above the
// last migration was written by a newer cq and is refused, untouched
// (docs/store.md, Migrations).
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

func (d *DB) userVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

func (d *DB) migrate(ctx context.Context) error {
	latest := LatestVersion()
	v, err := d.userVersion(ctx, d.SQL)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v == latest {
		return nil
	}
	// Several processes may open a new home at once: BEGIN IMMEDIATE makes
	// them take turns, and each re-reads the version under the lock.
	return d.Write(ctx, func(tx *Tx) error {
		v, err := d.userVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > latest {
			return fmt.Errorf("%w: schema version %d, this cq knows up to %d", ErrFutureSchema, v, latest)
		}
		for _, m := range Migrations() {
			if m.Version <= v {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d: %w", m.Version, err)
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.Version)); err != nil {
				return err
			}
		}
		return nil
	})
}
