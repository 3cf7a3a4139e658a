-- 0007: the retention walk, in a function whose plan does not depend on statistics.
-- Placeholders: {schema} (quoted schema name).

-- A retention batch locks the oldest succeeded jobs. As part of the purge statement the
-- walk was planned from the table's statistics. With none (a table filled by a bulk
-- enqueue and never analyzed) or stale ones, the planner expected a few succeeded rows
-- and fetched every old succeeded row through a bitmap scan to sort them all (on disk):
-- O(table) per batch instead of walking jobs_succeeded_completed_idx oldest first and
-- stopping after the batch. Here sorts and bitmap scans are disabled, for this function's
-- statements only: the ordered walk is the one plan without a disabled step, whatever
-- the statistics. Being the best plan for every argument, it is planned once per
-- connection (generic). Rows are returned oldest first, locked, skipping rows others hold.
CREATE FUNCTION {schema}.purge_candidates(older_than interval, batch integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
VOLATILE
ROWS 10
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
-- The generic plan's cost assumes the whole index is walked (the LIMIT is a parameter):
-- JIT would compile it at every call on a large analyzed table.
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id
    FROM {schema}.jobs AS j
    WHERE j.status = 'succeeded' AND j.completed_at < now() - older_than
    ORDER BY j.completed_at
    LIMIT batch
    FOR UPDATE OF j SKIP LOCKED;
END
$$;
