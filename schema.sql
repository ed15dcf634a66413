-- cq schema. Each "-- migration N" section is applied once, in order, to a
-- database whose PRAGMA user_version is below N; user_version then becomes N.
-- A database whose user_version is above the last migration here was written
-- by a newer cq and is refused, untouched.
--
-- Times are RFC 3339 UTC strings of fixed width (millisecond precision), so
-- that they compare correctly as text.

-- migration 1

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

-- migration 2

-- cq health on a large store: the oldest waiting task, the wait warnings
-- and the tasks blocked for a retry, each read from a small partial index.
CREATE INDEX tasks_todo_since ON tasks (todo_at) WHERE state = 'todo';
CREATE INDEX tasks_warned ON tasks (queue) WHERE state = 'todo' AND warned = 1;
CREATE INDEX tasks_blocked_retry ON tasks (queue) WHERE state = 'blocked' AND blocked_reason = 'retry';

-- migration 3

-- cq ls lists newest first by rowid (insertion order is creation order),
-- so this index only cost every insert a b-tree update and WAL pages.
DROP INDEX tasks_created;

-- migration 4

-- One partial index for live runs, on queue alone. Live runs are few (at
-- most the workers' slots), so the reaper and the start-timeout scan read
-- all of them from it, and the per-queue limit counts from it. A run that
-- goes from queued to running, or renews its lease, no longer rewrites an
-- index entry: a start commits 4 pages instead of 6.
DROP INDEX runs_live;
DROP INDEX runs_queue_live;
CREATE INDEX runs_live ON runs (queue) WHERE state IN ('queued','running','cancelling');

-- migration 5

-- The partial indexes that a transition rewrites state their states as
-- ORs of equalities. SQLite evaluates an IN list of more than two values
-- through a temporary b-tree, built afresh on every execution of a
-- statement that writes the row (once for the old row, once for the new),
-- about 4 µs each: a claim, start or finish paid it several times.
-- A query uses one of these indexes when its WHERE holds the same OR, or
-- an equality that implies it (state = 'cancelling' for runs_live).
-- The CHECK constraints on tasks.state and runs.state, evaluated on every
-- insert and every change of state, get the same form. A CHECK cannot be
-- altered, so they are rewritten in the table's stored definition, as
-- SQLite's documentation describes for changing a CHECK: the new one is
-- the same test, so every row already stored passes it. The DDL above and
-- below changes the schema cookie, so every connection reloads the schema;
-- RESET reloads it on this one.
DROP INDEX tasks_lane;
CREATE INDEX tasks_lane ON tasks (key, seq) WHERE key IS NOT NULL AND (state = 'todo' OR state = 'blocked' OR state = 'doing');
DROP INDEX tasks_key_live;
CREATE INDEX tasks_key_live ON tasks (key) WHERE key IS NOT NULL AND (state = 'inbox' OR state = 'todo' OR state = 'blocked' OR state = 'doing');
DROP INDEX runs_live;
CREATE INDEX runs_live ON runs (queue) WHERE (state = 'queued' OR state = 'running' OR state = 'cancelling');
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state IN (''inbox'',''todo'',''doing'',''blocked'',''done'',''failed'',''cancelled''))',
    'CHECK (state = ''inbox'' OR state = ''todo'' OR state = ''doing'' OR state = ''blocked'' OR state = ''done'' OR state = ''failed'' OR state = ''cancelled'')')
    WHERE type = 'table' AND name = 'tasks';
UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state IN (''queued'',''running'',''cancelling'',''succeeded'',''failed'',''timeout'',''cancelled''))',
    'CHECK (state = ''queued'' OR state = ''running'' OR state = ''cancelling'' OR state = ''succeeded'' OR state = ''failed'' OR state = ''timeout'' OR state = ''cancelled'')')
    WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;

-- migration 6

-- dep_end keeps how a dependency ended once cq cleanup has deleted it:
-- a task cancelled because its dependency failed must stay unretriable
-- after that dependency is gone (docs/semantics.md, Dependencies), while a dependency that
-- ended done and was deleted leaves nothing to wait for.
ALTER TABLE task_deps ADD COLUMN dep_end TEXT;

-- migration 7

-- events_task indexed every event by its task: five index entries per
-- task run, inserted in the middle of the index, for one reader, cq
-- cleanup (about a fifth of a claim and finish cycle's time). Only the
-- first and last events of a task are indexed now: its task.created and
-- its terminal ones. A task cleanup deletes is terminal, and all its
-- events lie between the two (a run ends in the transaction that ends its
-- task, and nothing writes an event of a terminal task but a transition
-- out of it); cleanup notes those seq windows and then deletes, window
-- by window, the events whose task is gone (Store.SweepEvents). The
-- cleanup query repeats this WHERE word for word, so it reads the index.
DROP INDEX events_task;
CREATE INDEX events_task_ends ON events (task_id)
    WHERE kind = 'task.created' OR kind = 'task.done' OR kind = 'task.failed' OR kind = 'task.cancelled';

-- migration 8

-- Leases expire on the host's boot-time clock (CLOCK_BOOTTIME), which a
-- step of the wall clock does not move: judged on the wall clock, a step
-- forward expired every healthy lease, and renewals during a step back
-- stored expiries that were early once the clock was set right. A run's
-- lease is the boot id of the host it was claimed on (boot_id) with its
-- expiry (lease_until_ns) and the claim (claimed_ns), both in nanoseconds
-- since that boot; the claim judges the start timeout on the same clock.
-- Two columns rather than one text of both: the readings compare as
-- integers, and the boot id as a plain equality, with no fixed-width
-- encoding to keep. A lease of another boot id is expired (the host
-- rebooted and its clock started again at zero). lease_expires_at stays
-- the wall-clock equivalent of the expiry, for people reading the store;
-- it decides only for a run with no boot id (claimed by an older cq, or
-- on a host whose boot id cannot be read), as it did before.
ALTER TABLE runs ADD COLUMN boot_id TEXT;
ALTER TABLE runs ADD COLUMN claimed_ns INTEGER;
ALTER TABLE runs ADD COLUMN lease_until_ns INTEGER;

-- migration 9

-- workers lists the live workers, for cq workers and for the warning of
-- cq health and cq enqueue when work waits and no worker is live. A
-- worker writes its row when it starts and again at each lease-renewal
-- tick, and deletes it when it stops cleanly; a row whose lease passed is
-- a worker gone without a word (SIGKILL, its host down), and the
-- maintenance pass deletes it once it has been dead for long. The lease
-- columns mean what they mean in runs, so that a worker's liveness is
-- judged on the boot clock like a run's lease; last_seen is the wall time
-- of the latest write, for display. The claim and finish paths never
-- write here: the runs a worker holds are counted from runs when read.
-- IF NOT EXISTS: a store set back to an older user_version by hand (as
-- the migration tests do) applies this section again.
CREATE TABLE IF NOT EXISTS workers (
    id               TEXT PRIMARY KEY,
    host             TEXT NOT NULL,
    pid              INTEGER NOT NULL,
    queues           TEXT NOT NULL,   -- a JSON array of names; [] = all
    concurrency      INTEGER NOT NULL,
    lease_ms         INTEGER NOT NULL,
    started_at       TEXT NOT NULL,
    last_seen        TEXT NOT NULL,
    boot_id          TEXT,
    lease_until_ns   INTEGER,
    lease_expires_at TEXT NOT NULL
);
