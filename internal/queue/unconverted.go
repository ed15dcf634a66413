package queue

import (
	"context"
	"database/sql"
	"errors"
)

// Helpers of the statements still in this package (complete.go,
// queues.go, read.go, runs.go, health.go); they go when those statements
// move into the store.

func queryIDs(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func scanTasks(rows *sql.Rows) ([]*taskRow, error) {
	defer rows.Close()
	var out []*taskRow
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// systemState is store.UpkeepReader's SystemStateGet over a querier.
func systemState(ctx context.Context, q querier, key string) (string, bool, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT value FROM system_state WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}
