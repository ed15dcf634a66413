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
