package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The floor runs every task once and records what the contract asks:
// three events per task, every run ended with its exit code, a run folder
// with both logs and summary.json.
func TestFloorRunsEveryTaskOnce(t *testing.T) {
	dir := t.TempDir()
	const n = 25
	if err := floorBacklog(dir, n); err != nil {
		t.Fatal(err)
	}
	ran, err := floorRun(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	if ran != n {
		t.Fatalf("ran %d tasks, want %d", ran, n)
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "floor.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for q, want := range map[string]int{
		`SELECT count(*) FROM tasks WHERE state = 'done' AND finished_at IS NOT NULL`:                     n,
		`SELECT count(*) FROM runs WHERE state = 'succeeded' AND exit_code = 0 AND pid > 0`:               n,
		`SELECT count(DISTINCT task_id) FROM runs`:                                                        n,
		`SELECT count(*) FROM events`:                                                                     3 * n,
		`SELECT count(*) FROM events e JOIN runs r ON r.id = e.run_id AND r.task_id = e.task_id`:          3 * n,
		`SELECT count(*) FROM runs WHERE started_at IS NULL OR ended_at IS NULL OR started_at > ended_at`: 0,
	} {
		var got int
		if err := db.QueryRow(q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %d, want %d", q, got, want)
		}
	}
	for run := 1; run <= n; run++ {
		for _, name := range []string{"stdout.log", "stderr.log", "summary.json"} {
			fi, err := os.Stat(filepath.Join(dir, "runs", strconv.Itoa(run), name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s of run %d: mode %v, want 0600", name, run, fi.Mode().Perm())
			}
		}
	}
}
