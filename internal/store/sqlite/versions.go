package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// The functions below serve the conformance suite's migration tests
// (internal/store/storetest): they make and inspect a store as an older
// or a newer cq left it, with the driver alone (no migration, no check).

// rawExec runs qs on the file at path, in order.
func rawExec(ctx context.Context, path string, qs ...string) error {
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	for _, q := range qs {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// MakeAtVersion makes a store at path as cq left it at schema version v
// (WAL mode and incremental auto-vacuum first, then migrations 1 to v),
// holding one done task id with its queue, two events and a system
// state row of the same name, all at time at: columns every version has.
func MakeAtVersion(ctx context.Context, path string, v int, id, at string) error {
	qs := []string{`PRAGMA auto_vacuum = INCREMENTAL`, `PRAGMA journal_mode = WAL`}
	for _, m := range Migrations()[:v] {
		qs = append(qs, m.SQL, fmt.Sprintf(`PRAGMA user_version = %d`, m.Version))
	}
	qs = append(qs,
		`INSERT INTO queues (name, created_at, updated_at) VALUES (?1, ?2, ?2)`,
		`INSERT INTO events (at, kind, task_id, from_state, to_state) VALUES
			(?2, 'task.created', ?1, NULL, 'inbox'), (?2, 'task.done', ?1, 'inbox', 'done')`,
		`INSERT INTO tasks (id, state, queue, priority, seq, spec, created_at, updated_at, finished_at)
			VALUES (?1, 'done', ?1, 1, 2, '{}', ?2, ?2, ?2)`,
		`INSERT INTO system_state (key, value, updated_at) VALUES (?1, 'yes', ?2)`)
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	for i, q := range qs {
		var args []any
		if i >= len(qs)-4 {
			args = []any{id, at}
		}
		if _, err := raw.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// SchemaVersion reads the schema version of the store at path.
func SchemaVersion(ctx context.Context, path string) (int, error) {
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return 0, err
	}
	defer raw.Close()
	var v int
	err = raw.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

// SetSchemaVersion marks the store at path as of schema version v.
func SetSchemaVersion(ctx context.Context, path string, v int) error {
	return rawExec(ctx, path, fmt.Sprintf(`PRAGMA user_version = %d`, v))
}
