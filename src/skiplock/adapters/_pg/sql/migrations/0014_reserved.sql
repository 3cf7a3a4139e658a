-- 0014: reserved for the migration of the `pause` branch (run-time limits and pauses),
-- which lands first; this placeholder only keeps the versions without a gap on the
-- `rates` branch (0015 follows it) and goes away when that migration lands.
SELECT 1;
