-- One partial index for live runs, on queue alone. Live runs are few (at
-- most the workers' slots), so the reaper and the start-timeout scan read
-- all of them from it, and the per-queue limit counts from it. A run that
-- goes from queued to running, or renews its lease, no longer rewrites an
-- index entry: a start commits 4 pages instead of 6.
DROP INDEX runs_live;
DROP INDEX runs_queue_live;
CREATE INDEX runs_live ON runs (queue) WHERE state IN ('queued','running','cancelling');
