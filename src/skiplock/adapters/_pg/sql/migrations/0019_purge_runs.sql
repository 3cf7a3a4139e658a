-- 0019: the retention view (issue 45, point 7; docs/retention.md): the last run of each
-- retention purge, kept by the store's purge (jobs) and purge_audit (audit events): when
-- it finished on the database's clock, how long it took and how many rows it removed.
-- One row per purge, replaced by the next run; a run that found another node purging
-- leaves the row alone.
-- Placeholders: {schema} (quoted schema name).

CREATE TABLE {schema}.purge_runs (
    name text PRIMARY KEY,
    finished_at timestamptz NOT NULL,
    seconds double precision NOT NULL,
    removed bigint NOT NULL
);
