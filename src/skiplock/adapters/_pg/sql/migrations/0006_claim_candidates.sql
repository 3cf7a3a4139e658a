-- 0006: the claim's index walk, in a function whose plan does not depend on statistics.
-- Placeholders: {schema} (quoted schema name).

-- Claiming locks the first due jobs in claim order. As part of one claim statement the
-- walk was planned from the table's statistics. With none (a new table filled by a bulk
-- enqueue) or stale ones (analyzed while empty, or while every job had succeeded), the
-- planner expected a few dozen pending rows and fetched every pending row through a
-- bitmap scan to sort them all: O(table) per claim (40-180 ms at 50,000 pending jobs)
-- instead of walking jobs_claim_idx in claim order and stopping after the batch (about
-- 1 ms). Here sorts and bitmap scans are disabled, for this function's statements only:
-- the ordered walk is the one plan without a disabled step, whatever the statistics.
-- Being the best plan for every argument, it is planned once per connection (generic).
--
-- Each lane walks the index for its own jobs, up to its own number, skipping rows other
-- claimers hold: a capped kind up to its cap; a capped (kind, tenant) pair up to its cap;
-- the rest (the kinds asked for, minus the excluded and capped kinds) up to batch. The
-- excluded pairs (which include the capped pairs) are left to their own lane. The
-- caller chooses among the rows returned; rows locked and not chosen are released when
-- its transaction ends. Rows are returned in no particular order.
CREATE FUNCTION {schema}.claim_candidates(
    batch integer,
    only_kinds text[],
    excluded_kinds text[],
    only_tenants text[],
    excluded_pair_kinds text[],
    excluded_pair_tenants text[],
    capped_kinds text[],
    caps integer[],
    pair_kinds text[],
    pair_tenants text[],
    pair_caps integer[]
)
RETURNS TABLE (id bigint, kind text, priority smallint, available_at timestamptz, suspect boolean)
LANGUAGE plpgsql
VOLATILE
ROWS 10
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
-- The generic plan's cost assumes the whole index is walked (the LIMIT is a parameter):
-- above jit_above_cost on a large analyzed table, JIT compiled it at every call (~20 ms).
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.id, c.kind, c.priority, c.available_at, c.suspect
    FROM (
        SELECT k.kind, NULL::text AS tenant_id, false AS paired, k.n
        FROM unnest(capped_kinds, caps) AS k (kind, n)
        UNION ALL
        SELECT p.kind, p.tenant_id, true, p.n
        FROM unnest(pair_kinds, pair_tenants, pair_caps) AS p (kind, tenant_id, n)
        UNION ALL
        SELECT NULL, NULL, false, batch
    ) AS lane
    CROSS JOIN LATERAL (
        SELECT j.id, j.kind, j.priority, j.available_at, j.started AS suspect
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending'
          AND j.available_at <= now()
          AND (only_tenants IS NULL OR j.tenant_id = ANY(only_tenants))
          AND CASE
              WHEN lane.kind IS NULL THEN
                  (only_kinds IS NULL OR j.kind = ANY(only_kinds))
                  AND j.kind <> ALL(excluded_kinds)
                  AND j.kind <> ALL(capped_kinds)
              ELSE j.kind = lane.kind
          END
          AND CASE
              WHEN lane.paired THEN j.tenant_id IS NOT DISTINCT FROM lane.tenant_id
              ELSE NOT EXISTS (
                  SELECT 1
                  FROM unnest(excluded_pair_kinds, excluded_pair_tenants) AS x (kind, tenant_id)
                  WHERE x.kind = j.kind AND x.tenant_id IS NOT DISTINCT FROM j.tenant_id
              )
          END
        ORDER BY j.priority DESC, j.available_at, j.id
        LIMIT lane.n
        FOR UPDATE OF j SKIP LOCKED
    ) AS c;
END
$$;
