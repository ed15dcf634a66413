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
