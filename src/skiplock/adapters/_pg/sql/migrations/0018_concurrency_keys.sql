-- 0018: concurrency keys (issue 41, docs/keys.md "Concurrency keys"): a job may carry a
-- key and a limit, and at most that many jobs of one key run at once, whatever their
-- kinds and workers. claim_candidates enforces it for every claim (a worker of the
-- previous release too): its walk leaves out the jobs of keys that run as many as they
-- may, then concurrency_room locks each key among the candidates (an advisory lock tried
-- without waiting: a key another claim is deciding on is skipped, as SKIP LOCKED skips
-- rows) and counts its running jobs with a snapshot taken after the lock. The lock is
-- held until the claim commits, so the next claimer's count includes what this one took.
-- A job whose key is full stays pending in its place; nothing is paid.
-- Placeholders: {schema} (quoted schema name).

-- Both NULL (no key), or a non-empty key with a limit of at least 1.
ALTER TABLE {schema}.jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_limit integer,
    ADD CONSTRAINT jobs_concurrency_check CHECK (
        CASE
            WHEN concurrency_key IS NULL THEN concurrency_limit IS NULL
            ELSE concurrency_key <> '' AND coalesce(concurrency_limit >= 1, false)
        END
    );

ALTER TABLE {schema}.jobs_archive
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_limit integer;

-- The running jobs of each key: as many entries as keyed jobs run (none without keys),
-- and only statements that name a key can use it. IF NOT EXISTS: on a large table it
-- can be built beforehand with CREATE INDEX CONCURRENTLY (docs/upgrading.md).
CREATE INDEX IF NOT EXISTS jobs_running_key_idx ON {schema}.jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;

-- How many jobs of each of keys run now, for the keys this transaction could lock: a
-- transaction-level advisory lock per key, tried without waiting (no claim ever waits
-- for another, so there is no order to keep and no deadlock); a key whose lock is held
-- elsewhere is left out (its jobs are not claimed this time). The count is a statement
-- of its own, so its snapshot is taken after the locks were granted: it sees every
-- claim of the key that committed before.
CREATE FUNCTION {schema}.concurrency_room(keys text[])
RETURNS TABLE (key text, running integer)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    locked text[];
BEGIN
    IF coalesce(cardinality(keys), 0) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(k.key ORDER BY k.key) INTO locked
    FROM (SELECT DISTINCT u.key FROM unnest(keys) AS u (key) WHERE u.key IS NOT NULL) AS k
    WHERE pg_try_advisory_xact_lock(
        hashtextextended(k.key, hashtextextended('skiplock concurrency key {schema}', 0))
    );
    RETURN QUERY
    SELECT l.key, (
        SELECT count(*)::int
        FROM {schema}.jobs AS j
        WHERE j.status = 'running' AND j.concurrency_key = l.key
    )
    FROM unnest(coalesce(locked, '{}')) AS l (key);
END
$$;

-- The walk of 0014, plus concurrency keys: the running jobs of each key are read first
-- (through jobs_running_key_idx) and a job whose key runs its limit is left out of the
-- walk, so full keys hold back nothing behind them; then the keyed candidates are kept
-- only within what concurrency_room says each key may still run, in claim order. Jobs
-- without a key cost one test per row.
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
BEGIN
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
                j.concurrency_key, j.concurrency_limit
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
                  ) < coalesce(j.concurrency_limit, 1)
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
