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
