-- 0010: throughput over time (the dashboard's chart): the jobs that finished since a
-- time, counted per bucket and final state, read through indexes whatever the
-- statistics say. Placeholders: {schema} (quoted schema name).

-- Dead, failed and cancelled jobs by completion time (succeeded ones are in
-- jobs_succeeded_completed_idx). Such rows are few and rarely written.
CREATE INDEX jobs_unsuccessful_completed_idx ON {schema}.jobs (completed_at)
    WHERE status IN ('failed', 'dead', 'cancelled');

-- The finished jobs since :since per bucket (date_bin from since) and state. Each branch
-- is a range of a partial index on completed_at; sequential scans are disabled for this
-- function's statement only, so with no statistics or stale ones (a table analyzed while
-- nothing had finished recently) it still reads the window's rows, never the table.
CREATE FUNCTION {schema}.finished_counts(since timestamptz, bucket interval)
RETURNS TABLE (start timestamptz, status text, count bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT date_bin(bucket, j.completed_at, since), j.status, count(*)
    FROM {schema}.jobs AS j
    WHERE j.status = 'succeeded' AND j.completed_at >= since
    GROUP BY 1, 2
    UNION ALL
    SELECT date_bin(bucket, j.completed_at, since), j.status, count(*)
    FROM {schema}.jobs AS j
    WHERE j.status IN ('failed', 'dead', 'cancelled') AND j.completed_at >= since
    GROUP BY 1, 2
$$;
