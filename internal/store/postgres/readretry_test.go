package postgres_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
)

// TestReadsOutliveLostConnections: the server ends every session of the
// store (as a restart or a failover does) between two reads; the next
// reads, of each kind, are sent again on new connections and answer,
// rather than fail with the lost connection.
func TestReadsOutliveLostConnections(t *testing.T) {
	t.Parallel()
	// An application name of its own: the sessions ended are this
	// store's alone, not those of tests running beside it.
	app := pgtest.NewName()
	url := newURL(t) + "&application_name=" + app
	d, _ := openTest(t, url, postgres.Migrations())
	st := d.Store()
	// Connections the pool holds, each used a moment ago (an idle one
	// is checked before use only after a second).
	for range 3 {
		if _, err := st.TaskState(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TaskState: %v", err)
		}
	}
	admin, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for round := range 3 {
		var ended int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1`, app).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		if ended == 0 {
			t.Fatalf("round %d: no session of the store to end", round)
		}
		switch round {
		case 0:
			if _, err := st.TaskState(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("round %d: TaskState after the sessions ended: %v; want ErrNotFound", round, err)
			}
		case 1:
			if ids, err := st.TaskIDsWithPrefix(ctx, "x", 5); err != nil || len(ids) != 0 {
				t.Errorf("round %d: TaskIDsWithPrefix after the sessions ended: %v, %v; want none", round, ids, err)
			}
		case 2:
			err := st.Snapshot(ctx, func(r store.Reader) error {
				_, err := r.TaskState(ctx, "nope")
				if errors.Is(err, store.ErrNotFound) {
					return nil
				}
				return err
			})
			if err != nil {
				t.Errorf("round %d: Snapshot after the sessions ended: %v", round, err)
			}
		}
	}
}
