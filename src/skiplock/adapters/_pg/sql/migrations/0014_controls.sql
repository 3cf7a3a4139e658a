-- 0014: run-time controls (issue 30): pauses per kind, tenant or (kind, tenant), and
-- rate limits per (kind, tenant) and per provider, set by an operator while workers run.
-- Every worker reads both tables every Settings.controls_refresh (a few rows); a paused
-- kind, tenant or pair is left out of claims, so claim_candidates takes the paused
-- tenants (of any kind) as one more exclusion, in every lane. The walk stays the ordered
-- walk of jobs_claim_idx (a filter on the rows it reads).
-- Placeholders: {schema} (quoted schema name).

-- NULL kind or tenant means "any"; the unique indexes treat NULL as one value.
CREATE TABLE {schema}.pauses (
    kind text,
    tenant_id text,
    reason text,
    actor text,
    since timestamptz NOT NULL DEFAULT now(),
    CHECK (kind IS NOT NULL OR tenant_id IS NOT NULL)
);

CREATE UNIQUE INDEX pauses_scope_idx
    ON {schema}.pauses ((coalesce(kind, '')), (coalesce(tenant_id, '')));

-- A kind's limit (tenant_id NULL: its default for every tenant without its own), or a
-- provider's cap across its kinds (kind and tenant_id NULL).
CREATE TABLE {schema}.limits (
    kind text,
    tenant_id text,
    provider text,
    rps double precision NOT NULL CHECK (rps > 0),
    burst integer NOT NULL CHECK (burst >= 1),
    actor text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind IS NULL) <> (provider IS NULL)),
    CHECK (provider IS NULL OR tenant_id IS NULL)
);

CREATE UNIQUE INDEX limits_scope_idx ON {schema}.limits
    ((coalesce(kind, '')), (coalesce(tenant_id, '')), (coalesce(provider, '')));

DROP FUNCTION {schema}.claim_candidates(
    integer, text[], text[], text[], text[], text[], text[], integer[], text[], text[], integer[]
);

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
    pair_caps integer[],
    -- Last and optional: a worker of the previous release calls without it (by name)
    -- and keeps claiming while the fleet is upgraded.
    excluded_tenants text[] DEFAULT '{}'
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
          AND (j.tenant_id IS NULL OR j.tenant_id <> ALL(excluded_tenants))
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
