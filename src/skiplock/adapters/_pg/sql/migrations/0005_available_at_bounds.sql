-- 0005: a job's due time stays within the range Python reads back in any session time
-- zone (skiplock.core.MIN_AVAILABLE_AT .. MAX_AVAILABLE_AT, which enqueue validates):
-- a row outside it could be written by plain SQL or a retry delay, but never read.
-- Placeholders: {schema} (quoted schema name), {channel} (quoted channel literal text).

-- Rows written before (plain SQL) are moved into the range first, keeping what they
-- meant, so the constraint can be added: too early (-infinity, BC) is due now at the
-- earliest instant, too late (infinity, year 10000 on) at the latest.
UPDATE {schema}.jobs SET available_at = '0001-01-03 00:00:00+00'
WHERE available_at < '0001-01-03 00:00:00+00';
UPDATE {schema}.jobs SET available_at = '9999-12-29 00:00:00+00'
WHERE available_at > '9999-12-29 00:00:00+00';

ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_available_at_check CHECK (
    available_at BETWEEN '0001-01-03 00:00:00+00' AND '9999-12-29 00:00:00+00'
);
