package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
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
type Migration struct {
	Version int
	SQL     string
}

// migrationFile is a migration's file, named but not yet read.
type migrationFile struct {
	version int
	name    string
}

// readMigrations lists the migration files of fsys in order of version
// and checks their names: NNNN_short_name.sql, numbered 1, 2, 3, … with
// no gap and no number twice.
func readMigrations(fsys fs.FS) ([]migrationFile, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var files []migrationFile
	for _, e := range ents {
		name := e.Name()
		num, rest, _ := strings.Cut(name, "_")
		short, ok := strings.CutSuffix(rest, ".sql")
		if !ok || len(num) != 4 || strings.Trim(num, "0123456789") != "" || short == "" ||
			strings.Trim(short, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || e.IsDir() {
			return nil, fmt.Errorf("migration file %s: want NNNN_short_name.sql", name)
		}
		v, _ := strconv.Atoi(num)
		files = append(files, migrationFile{version: v, name: name})
	}
	if len(files) == 0 {
		return nil, errors.New("no migration files")
	}
	slices.SortStableFunc(files, func(a, b migrationFile) int { return a.version - b.version })
	for i, f := range files {
		switch {
		case i > 0 && f.version == files[i-1].version:
			return nil, fmt.Errorf("migration files %s and %s have the same number", files[i-1].name, f.name)
		case f.version != i+1:
			return nil, fmt.Errorf("migration file %s: number %d, want %d (numbers go 1, 2, 3, … with no gap)", f.name, f.version, i+1)
		}
	}
	return files, nil
}

// migrationFiles are the embedded migrations' files, listed and checked
// once, on first use (every Open reads LatestVersion). Only their names:
// a short command on an up-to-date store reads no migration's SQL.
var migrationFiles = sync.OnceValue(func() []migrationFile {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err == nil {
		var files []migrationFile
		if files, err = readMigrations(sub); err == nil {
			return files
		}
	}
	// Embedded at build time and checked by TestMigrationFiles: a build
	// that fails here was never tested.
	panic("cq's embedded migrations: " + err.Error())
})

// migrations reads the migrations' SQL once, when a store is migrated.
var migrations = sync.OnceValue(func() []Migration {
	files := migrationFiles()
	out := make([]Migration, len(files))
	for i, f := range files {
		b, err := migrationFS.ReadFile("migrations/" + f.name)
		if err != nil {
			panic("cq's embedded migrations: " + err.Error())
		}
		out[i] = Migration{Version: f.version, SQL: string(b)}
	}
	return out
})

// Migrations returns the embedded migrations in order of version.
func Migrations() []Migration { return migrations() }

// LatestVersion is the schema version this build writes.
func LatestVersion() int {
	m := migrationFiles()
	return m[len(m)-1].version
}

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
