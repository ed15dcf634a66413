-- Recurring schedules (docs/schedules.md): each makes one task per slot of
-- its cron expression. last_slot is how far its slots have been taken
-- (a compare-and-set moves it, so that racing passes take each slot
-- once); last_task the newest task it made.
CREATE TABLE IF NOT EXISTS schedules (
    name       TEXT PRIMARY KEY,
    expr       TEXT NOT NULL,
    tz         TEXT NOT NULL,
    spec       TEXT NOT NULL,
    catch_up   TEXT NOT NULL CHECK (catch_up = 'none' OR catch_up = 'last' OR catch_up = 'all'),
    overlap    TEXT NOT NULL CHECK (overlap = 'skip' OR overlap = 'queue'),
    paused     INTEGER NOT NULL DEFAULT 0,
    last_slot  TEXT NOT NULL,
    last_task  TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
