-- 0020: concurrency limits set at run time (issue 45, docs/controls.md "Concurrency at
-- run time"): an operator's limit of a kind (per node or cluster-wide) or of a
-- concurrency key, over the limit the code declares, until cleared. Workers read the
-- kinds' limits with the other controls and claim by them; a key's limit the claim
-- itself reads (claim_candidates below), so it holds for every claimer, a worker of the
-- previous release too.
-- Placeholders: {schema} (quoted schema name).

CREATE TABLE {schema}.concurrency_limits (
    kind text,
    concurrency_key text,
    scope text NOT NULL CHECK (scope IN ('node', 'cluster')),
    max_running integer NOT NULL CHECK (max_running >= 1),
    actor text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind IS NULL) <> (concurrency_key IS NULL)),
    CHECK (concurrency_key IS NULL OR scope = 'cluster')
);

CREATE UNIQUE INDEX concurrency_limits_scope_idx ON {schema}.concurrency_limits
    ((coalesce(kind, '')), (coalesce(concurrency_key, '')), scope);

-- The walk of 0018, with the keys' limits set at run time: a job of a key with one
-- counts against it instead of its own concurrency_limit.
CREATE OR REPLACE FUNCTION {schema}.claim_candidates(
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
-- The running jobs of the keys are grouped in the order of jobs_running_key_idx: with
-- sorts and hashing off no other index (jobs_running_kind_idx reads every running job)
-- can serve that read, whatever the statistics say.
SET enable_hashagg = off
-- The generic plan's cost assumes the whole index is walked (the LIMIT is a parameter):
-- above jit_above_cost on a large analyzed table, JIT compiled it at every call (~20 ms).
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    run_keys text[];
    run_counts integer[];
    set_keys text[];
    set_limits integer[];
BEGIN
    -- The keys' limits set at run time (0020), read once: they win over the jobs' own.
    SELECT coalesce(array_agg(o.concurrency_key), '{}'), coalesce(array_agg(o.max_running), '{}')
    INTO set_keys, set_limits
    FROM {schema}.concurrency_limits AS o
    WHERE o.concurrency_key IS NOT NULL;
    SELECT coalesce(array_agg(r.key), '{}'), coalesce(array_agg(r.n), '{}')
    INTO run_keys, run_counts
    FROM (
        SELECT j.concurrency_key AS key, count(*)::int AS n
        FROM {schema}.jobs AS j
        WHERE j.status = 'running' AND j.concurrency_key IS NOT NULL
        GROUP BY j.concurrency_key
    ) AS r;
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT w.id, w.kind, w.priority, w.available_at, w.suspect, w.concurrency_key,
            w.concurrency_limit
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
            SELECT j.id, j.kind, j.priority, j.available_at, j.started AS suspect,
                j.concurrency_key,
                coalesce(
                    (SELECT s.n FROM unnest(set_keys, set_limits) AS s (key, n)
                     WHERE s.key = j.concurrency_key),
                    j.concurrency_limit
                ) AS concurrency_limit
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
              AND CASE
                  WHEN j.concurrency_key IS NULL THEN true
                  ELSE coalesce(
                      (SELECT r.n FROM unnest(run_keys, run_counts) AS r (key, n)
                       WHERE r.key = j.concurrency_key),
                      0
                  ) < coalesce(
                      (SELECT s.n FROM unnest(set_keys, set_limits) AS s (key, n)
                       WHERE s.key = j.concurrency_key),
                      j.concurrency_limit,
                      1
                  )
              END
            ORDER BY j.priority DESC, j.available_at, j.id
            LIMIT lane.n
            FOR UPDATE OF j SKIP LOCKED
        ) AS w
    ),
    room AS MATERIALIZED (
        SELECT r.key, r.running
        FROM {schema}.concurrency_room(
            ARRAY(SELECT c.concurrency_key FROM c WHERE c.concurrency_key IS NOT NULL)
        ) AS r
    ),
    ranked AS (
        SELECT c.*,
            row_number() OVER (
                PARTITION BY c.concurrency_key ORDER BY c.priority DESC, c.available_at, c.id
            ) AS key_n
        FROM c
    )
    SELECT r.id, r.kind, r.priority, r.available_at, r.suspect
    FROM ranked AS r
    LEFT JOIN room ON room.key = r.concurrency_key
    WHERE r.concurrency_key IS NULL
       OR room.running + r.key_n <= coalesce(r.concurrency_limit, 1);
END
$$;
