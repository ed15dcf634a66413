package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The functions below serve the migration tests (here, and the
// conformance suite's in internal/store/storetest): they make and inspect
// a schema as an older or a newer cq left it, without migrating it or
// checking its version.

// connect opens one plain connection to url's database, its sessions
// searching url's schema, and returns it with the schema's name.
func connect(ctx context.Context, url string) (*pgx.Conn, string, error) {
	cfg, err := ParseURL(url)
	if err != nil {
		return nil, "", err
	}
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	return c, cfg.Schema, err
}

// SchemaVersion reads the schema version at url: 0 when the schema or its
// version table is missing.
func SchemaVersion(ctx context.Context, url string) (int, error) {
	c, schema, err := connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	st, err := readState(ctx, c, schema)
	return st.version, err
}

// SetSchemaVersion records v as the schema version at url, and changes
// nothing else: the rows of versions above v go, and v's is added if
// missing. The version table must exist.
func SetSchemaVersion(ctx context.Context, url string, v int) error {
	c, schema, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE version > $1`, v); err != nil {
			return err
		}
		if v == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` (version) VALUES ($1) ON CONFLICT (version) DO NOTHING`, v)
		return err
	})
}

// MakeAtVersion makes the schema at url (created if missing) as cq left
// it at schema version v, migrations 1 to v applied, holding one done
// task id with its queue, its two events and a system_state row of the
// same name, all at time at: columns every version has.
func MakeAtVersion(ctx context.Context, url string, v int, id, at string) error {
	ms := Migrations()
	if v < 1 || v > len(ms) {
		return fmt.Errorf("no schema version %d: this build has 1 to %d", v, len(ms))
	}
	cfg, err := ParseURL(url)
	if err != nil {
		return err
	}
	d, _, err := openWith(ctx, cfg, ms[:v])
	if err != nil {
		return err
	}
	defer d.Close()
	return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO queues (name, created_at, updated_at) VALUES ($1, $2, $2)`, id, at)
		b.Queue(`INSERT INTO events (seq, at, kind, task_id, from_state, to_state) VALUES
			(1, $2, 'task.created', $1, NULL, 'inbox'), (2, $2, 'task.done', $1, 'inbox', 'done')`, id, at)
		b.Queue(`UPDATE event_seq SET last = 2`)
		b.Queue(`SELECT setval('task_seq', 2)`)
		b.Queue(`INSERT INTO tasks (id, state, queue, priority, seq, spec, created_at, updated_at, finished_at)
			VALUES ($1, 'done', $1, 1, 2, '{}', $2, $2, $2)`, id, at)
		b.Queue(`INSERT INTO system_state (key, value, updated_at) VALUES ($1, 'yes', $2)`, id, at)
		return tx.SendBatch(ctx, b).Close()
	})
}
