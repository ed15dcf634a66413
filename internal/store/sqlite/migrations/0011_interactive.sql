-- Runs that talk back (docs/interactive.md).
--
-- asks holds the questions runs ask their operators (cq ask): open until
-- answered, or denied by their timeout, a cancel or their worker's
-- shutdown. A question goes with its run (cleanup).
CREATE TABLE IF NOT EXISTS asks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    task_id     TEXT NOT NULL,
    question    TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state = 'open' OR state = 'approved' OR state = 'denied'),
    reason      TEXT,
    asked_at    TEXT NOT NULL,
    expires_at  TEXT,
    answered_at TEXT
);
CREATE INDEX IF NOT EXISTS asks_run ON asks (run_id);
CREATE INDEX IF NOT EXISTS asks_task ON asks (task_id);
CREATE INDEX IF NOT EXISTS asks_open ON asks (id) WHERE state = 'open';

-- messages holds what operators send to running tasks (cq send), each
-- delivered once, to the first run of its task that receives (cq recv).
CREATE TABLE IF NOT EXISTS messages (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id  TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    body     TEXT NOT NULL,
    sent_at  TEXT NOT NULL,
    sent_run TEXT,
    recv_run TEXT,
    recv_at  TEXT
);
CREATE INDEX IF NOT EXISTS messages_task ON messages (task_id, id);

-- run_progress keeps each run's latest progress (cq progress), in a table
-- of its own so that the frequent reports do not rewrite runs' rows.
-- pending: the latest report has no run.progress event yet (reports are
-- rate-limited); upkeep writes it.
CREATE TABLE IF NOT EXISTS run_progress (
    run_id   TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    task_id  TEXT NOT NULL,
    done     INTEGER,
    total    INTEGER,
    message  TEXT,
    at       TEXT NOT NULL,
    event_at TEXT,
    pending  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS run_progress_pending ON run_progress (event_at) WHERE pending;

-- probe: the run is of a probe task (--probe), whose failures are expected:
-- cq health leaves it out.
ALTER TABLE runs ADD COLUMN probe INTEGER NOT NULL DEFAULT 0;

-- timeout_counts_asks: waits for answers count toward run time limits (--timeout-counts-asks).
ALTER TABLE queues ADD COLUMN timeout_counts_asks INTEGER NOT NULL DEFAULT 0;
