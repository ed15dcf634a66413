-- Times are RFC 3339 UTC strings of fixed width (millisecond precision), so
-- that they compare correctly as text.

-- tasks holds one row per task, whatever its state.
CREATE TABLE tasks (
    id             TEXT PRIMARY KEY,
    state          TEXT NOT NULL CHECK (state IN ('inbox','todo','doing','blocked','done','failed','cancelled')),
    queue          TEXT NOT NULL,
    key            TEXT,
    priority       INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 3),
    -- seq orders tasks for claims and key lanes: taken from the gateway
    -- step's event seq, renewed when cq retry sends a task to the back of
    -- its lane. NULL while the task is in inbox (not yet in a lane).
    seq            INTEGER,
    -- lane_head is 1 for the task a key lane may run next (always 1 for an
    -- unkeyed task in a lane), kept in the same transactions that enqueue,
    -- finish and cancel tasks, so a claim never walks past lane-blocked work.
    lane_head      INTEGER NOT NULL DEFAULT 0,
    spec           TEXT NOT NULL,   -- the normalised task spec, as JSON
    is_unique      INTEGER NOT NULL DEFAULT 0,
    hold           INTEGER NOT NULL DEFAULT 0,
    deps_left      INTEGER NOT NULL DEFAULT 0, -- dependencies not yet done
    not_before     TEXT,
    not_before_why TEXT CHECK (not_before_why IN ('retry','scheduled')),
    blocked_reason TEXT,
    reason         TEXT,            -- why the task reached its current state
    attempts       INTEGER NOT NULL DEFAULT 0,
    -- failures spent per retry class since creation or the last cq retry.
    fails_other     INTEGER NOT NULL DEFAULT 0,
    fails_transient INTEGER NOT NULL DEFAULT 0,
    fails_timeout   INTEGER NOT NULL DEFAULT 0,
    todo_at        TEXT,            -- latest entry into todo
    warned         INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    finished_at    TEXT
);

-- Runnable lane heads only: the claim reads this index and nothing else.
CREATE INDEX tasks_claim ON tasks (queue, priority, seq) WHERE state = 'todo' AND lane_head = 1;
-- Live members of each key lane, in lane order.
CREATE INDEX tasks_lane ON tasks (key, seq) WHERE key IS NOT NULL AND state IN ('todo','blocked','doing');
CREATE INDEX tasks_state ON tasks (state, queue);
CREATE INDEX tasks_due ON tasks (not_before) WHERE state = 'blocked' AND not_before IS NOT NULL;
CREATE INDEX tasks_finished ON tasks (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_key_live ON tasks (key) WHERE key IS NOT NULL AND state IN ('inbox','todo','blocked','doing');
CREATE INDEX tasks_created ON tasks (created_at, id);

-- task_deps records --after: task_id waits for dep_id.
CREATE TABLE task_deps (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    dep_id  TEXT NOT NULL,
    pos     INTEGER NOT NULL,
    PRIMARY KEY (task_id, dep_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_dep ON task_deps (dep_id);

-- runs holds one row per attempt.
CREATE TABLE runs (
    id           TEXT PRIMARY KEY,
    task_id      TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('queued','running','cancelling','succeeded','failed','timeout','cancelled')),
    queue        TEXT NOT NULL,
    worker       TEXT,
    host         TEXT,
    lease_token  TEXT,
    lease_expires_at TEXT,
    pid          INTEGER,
    pgid         INTEGER,
    exit_code    INTEGER,
    signal       TEXT,
    error        TEXT,
    reason       TEXT,
    created_at   TEXT NOT NULL,
    started_at   TEXT,
    ended_at     TEXT,
    UNIQUE (task_id, attempt)
);
CREATE INDEX runs_live ON runs (state, lease_expires_at) WHERE state IN ('queued','running','cancelling');
CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX runs_queue_live ON runs (queue) WHERE state IN ('queued','running','cancelling');

-- events is the append-only log of every transition; seq never repeats.
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         TEXT NOT NULL,
    kind       TEXT NOT NULL,
    task_id    TEXT,
    run_id     TEXT,
    from_state TEXT,
    to_state   TEXT,
    reason     TEXT,
    data       TEXT
);
CREATE INDEX events_task ON events (task_id);

-- queues holds settings; a queue named by a task but never set has defaults.
CREATE TABLE queues (
    name              TEXT PRIMARY KEY,
    paused            INTEGER NOT NULL DEFAULT 0,
    concurrency       INTEGER NOT NULL DEFAULT 0,
    retries           INTEGER NOT NULL DEFAULT 0,
    backoff_ms        INTEGER NOT NULL DEFAULT 30000,
    transient_retries INTEGER NOT NULL DEFAULT 3,
    timeout_retries   INTEGER NOT NULL DEFAULT 1,
    timeout_ms        INTEGER NOT NULL DEFAULT 0,
    start_timeout_ms  INTEGER NOT NULL DEFAULT 600000,
    warn_after_ms     INTEGER NOT NULL DEFAULT 600000,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);

-- system_state is seed 001's key/value table: last_heartbeat, queue_length, health.
CREATE TABLE system_state (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
