-- Recurring schedules (docs/schedules.md): as SQLite's migration 12.
-- last_slot is how far a schedule's slots have been taken (a
-- compare-and-set moves it, so that racing passes on many hosts take
-- each slot once); last_task the newest task it made.
CREATE TABLE schedules (
    name       text COLLATE "C" PRIMARY KEY,
    expr       text NOT NULL,
    tz         text NOT NULL,
    spec       text NOT NULL,
    catch_up   text COLLATE "C" NOT NULL CHECK (catch_up IN ('none','last','all')),
    overlap    text COLLATE "C" NOT NULL CHECK (overlap IN ('skip','queue')),
    paused     boolean NOT NULL DEFAULT false,
    last_slot  text COLLATE "C" NOT NULL,
    last_task  text COLLATE "C",
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL
);
