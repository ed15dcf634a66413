-- run_output keeps the end of a run's output with the run, where hosts
-- share the store, so that cq logs on a host other than the run's prints
-- it: the last bytes of stdout and of stderr (at most 64 KiB each), their
-- whole sizes (a tail shorter than its size was cut), and the host whose
-- run folder has the whole of it. A worker of a store on one host (SQLite)
-- does not write it: every cq there reads the run folder itself. A table
-- of its own keeps runs' rows small: lease renewals rewrite them.
CREATE TABLE IF NOT EXISTS run_output (
    run_id      TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    host        TEXT NOT NULL,
    stdout      BLOB NOT NULL,
    stderr      BLOB NOT NULL,
    stdout_size INTEGER NOT NULL,
    stderr_size INTEGER NOT NULL
);
