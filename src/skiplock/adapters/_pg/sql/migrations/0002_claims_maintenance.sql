-- 0002: a claim counter for ABA-proof fencing, and once-per-period maintenance (J13).
-- Placeholders: {schema} (quoted schema name).

-- +1 at every claim, never reset (not by a release, not by a replay that resets
-- attempts), so a lease names exactly one claim and a stale run cannot complete a later
-- claim of the same worker. A constant default adds the column without rewriting the
-- table (PostgreSQL >= 11); no CHECK constraint, which would scan the hot table under
-- an exclusive lock. The archive keeps the default so older purge queries still work.
ALTER TABLE {schema}.jobs ADD COLUMN claims integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.jobs_archive ADD COLUMN claims integer NOT NULL DEFAULT 0;

-- When each maintenance task (stale-claim recovery, retention, ...) last ran, on the
-- database clock. A node takes a run with one INSERT ... ON CONFLICT DO UPDATE ... WHERE
-- last_run_at <= now() - period: the row lock makes exactly one caller win per period.
CREATE TABLE {schema}.maintenance (
    name text PRIMARY KEY,
    last_run_at timestamptz NOT NULL
);
