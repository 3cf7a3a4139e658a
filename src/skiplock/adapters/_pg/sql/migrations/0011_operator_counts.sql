-- 0011: operator reads independent of the table's size. counts(), health and
-- throughput read running totals instead of grouping every job: O(kinds x tenants x
-- states) and O(minutes), never O(jobs). Placeholders: {schema} (quoted schema name).
--
-- Writers never touch a shared row: statement-level triggers on jobs append one
-- aggregated row per (kind, tenant, state, finished minute) that a statement changed to
-- job_count_deltas (nothing when it changed no state); a rollup (the workers' counts
-- loop, or a read that finds many deltas) folds them into job_counts and
-- job_finished_minutes. A read adds the deltas not yet folded to the totals in one
-- statement, so it is exact in its snapshot. The backfill below costs one scan of jobs.

-- Totals per (kind, tenant, state): the jobs folded so far (rows at 0 are removed).
CREATE TABLE {schema}.job_counts (
    kind text NOT NULL,
    tenant_id text,
    status text NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT job_counts_key UNIQUE NULLS NOT DISTINCT (kind, tenant_id, status)
);

-- Finished jobs (succeeded, failed, dead, cancelled) per minute of completed_at (UTC
-- minutes) and state, folded so far: throughput over time reads O(minutes). A job that
-- leaves the state (replayed, deleted, purged by retention) leaves its minute too, so a
-- minute's row disappears with its last job (no trimming, no horizon).
CREATE TABLE {schema}.job_finished_minutes (
    minute timestamptz NOT NULL,
    status text NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (minute, status)
);

-- Changes not yet folded: append-only for writers (no row two transactions both
-- update, so no lock waits or deadlocks in enqueue, claim and complete transactions);
-- minute is set for the finished states. Emptied by every rollup: vacuumed often.
CREATE TABLE {schema}.job_count_deltas (
    kind text NOT NULL,
    tenant_id text,
    status text NOT NULL,
    minute timestamptz,
    n bigint NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000
);

-- The minute a finished job counts in (NULL for the other states, or no completed_at).
CREATE FUNCTION {schema}.finished_minute(status text, completed_at timestamptz)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE
    WHEN status IN ('succeeded', 'failed', 'dead', 'cancelled')
    THEN date_bin('1 minute', completed_at, timestamptz '2000-01-01 00:00:00+00')
END;

-- One trigger function for the three events (transition tables need a trigger each):
-- the rows a statement removed count -1, the rows it added +1, summed per key; keys
-- whose sum is 0 (a statement that changed no state, kind, tenant or finished minute,
-- such as a job's start or a heartbeat) write nothing.
CREATE FUNCTION {schema}.count_jobs() RETURNS trigger
LANGUAGE plpgsql
-- A claim's or completion's handful of rows never needs JIT (its planner estimate for a
-- transition table can exceed jit_above_cost: compiling would cost more than the run).
SET jit = off
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.job_count_deltas (kind, tenant_id, status, minute, n)
        SELECT r.kind, r.tenant_id, r.status,
               {schema}.finished_minute(r.status, r.completed_at), count(*)
        FROM new_rows AS r
        GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {schema}.job_count_deltas (kind, tenant_id, status, minute, n)
        SELECT r.kind, r.tenant_id, r.status,
               {schema}.finished_minute(r.status, r.completed_at), -count(*)
        FROM old_rows AS r
        GROUP BY 1, 2, 3, 4;
    ELSE
        INSERT INTO {schema}.job_count_deltas (kind, tenant_id, status, minute, n)
        SELECT c.kind, c.tenant_id, c.status, c.minute, sum(c.n)
        FROM (
            SELECT r.kind, r.tenant_id, r.status,
                   {schema}.finished_minute(r.status, r.completed_at) AS minute, -1 AS n
            FROM old_rows AS r
            UNION ALL
            SELECT r.kind, r.tenant_id, r.status,
                   {schema}.finished_minute(r.status, r.completed_at), 1
            FROM new_rows AS r
        ) AS c
        GROUP BY 1, 2, 3, 4
        HAVING sum(c.n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_count_insert
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_jobs();

CREATE TRIGGER jobs_count_update
    AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_jobs();

CREATE TRIGGER jobs_count_delete
    AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_jobs();

-- TRUNCATE of jobs (tests, a reset) empties the counts with it.
CREATE FUNCTION {schema}.count_jobs_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.job_count_deltas;
    DELETE FROM {schema}.job_counts;
    DELETE FROM {schema}.job_finished_minutes;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_count_truncate
    AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_jobs_truncated();

-- Fold the deltas into the totals: one session at a time (lock_key, an advisory lock
-- held to the end of the transaction; NULL when another session holds it), the deltas
-- visible to this statement only (those of transactions still open stay for the next
-- rollup). Returns the number of delta rows folded.
CREATE FUNCTION {schema}.roll_up_job_counts(lock_key bigint)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    folded integer;
    zero_kinds text[];
    zero_tenants text[];
    zero_states text[];
    zero_minutes timestamptz[];
    zero_minute_states text[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_key) THEN
        RETURN NULL;
    END IF;
    WITH gone AS (
        DELETE FROM {schema}.job_count_deltas
        RETURNING kind, tenant_id, status, minute, n
    ),
    totals AS (
        INSERT INTO {schema}.job_counts AS c (kind, tenant_id, status, n)
        SELECT g.kind, g.tenant_id, g.status, sum(g.n)
        FROM gone AS g
        GROUP BY 1, 2, 3
        ON CONFLICT (kind, tenant_id, status) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING c.kind, c.tenant_id, c.status, c.n
    ),
    minutes AS (
        INSERT INTO {schema}.job_finished_minutes AS m (minute, status, n)
        SELECT g.minute, g.status, sum(g.n)
        FROM gone AS g
        WHERE g.minute IS NOT NULL
        GROUP BY 1, 2
        ON CONFLICT (minute, status) DO UPDATE SET n = m.n + EXCLUDED.n
        RETURNING m.minute, m.status, m.n
    )
    SELECT
        (SELECT count(*) FROM gone),
        (SELECT array_agg(t.kind) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(t.tenant_id) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(t.status) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(f.minute) FROM minutes AS f WHERE f.n = 0),
        (SELECT array_agg(f.status) FROM minutes AS f WHERE f.n = 0)
    INTO folded, zero_kinds, zero_tenants, zero_states, zero_minutes, zero_minute_states;
    IF zero_kinds IS NOT NULL THEN
        DELETE FROM {schema}.job_counts AS c
        USING unnest(zero_kinds, zero_tenants, zero_states) AS z (kind, tenant_id, status)
        WHERE c.kind = z.kind AND c.tenant_id IS NOT DISTINCT FROM z.tenant_id
          AND c.status = z.status AND c.n = 0;
    END IF;
    IF zero_minutes IS NOT NULL THEN
        DELETE FROM {schema}.job_finished_minutes AS m
        USING unnest(zero_minutes, zero_minute_states) AS z (minute, status)
        WHERE m.minute = z.minute AND m.status = z.status AND m.n = 0;
    END IF;
    RETURN folded;
END
$$;

-- The oldest due job of a (kind, tenant) and the scheduled/due split: one index probe
-- each, never the table.
CREATE INDEX jobs_pending_group_idx ON {schema}.jobs (kind, tenant_id, available_at)
    WHERE status = 'pending';

-- Per (kind, tenant), one record: the earliest pending available_at (due or not), the
-- earliest due one, and the scheduled (available_at > now()) jobs counted up to bound + 1; when
-- there are more, the due ones counted up to bound + 1 (else NULL): reads at most
-- 2 * (bound + 1) index entries. Plain index walks whatever the statistics say. A NULL
-- bound reads nothing (all NULL): callers pass it for groups without pending jobs. The
-- two branches differ only in the tenant test: "tenant_id IS NULL" and "tenant_id = $1"
-- are index conditions, "IS NOT DISTINCT FROM" is not.
CREATE FUNCTION {schema}.pending_probe(
    group_kind text,
    group_tenant text,
    bound integer,
    OUT first_at timestamptz,
    OUT first_due_at timestamptz,
    OUT scheduled bigint,
    OUT due bigint
)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
BEGIN
    IF bound IS NULL THEN
        RETURN;
    ELSIF group_tenant IS NULL THEN
        SELECT j.available_at INTO first_at FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id IS NULL
        ORDER BY j.available_at LIMIT 1;
        SELECT count(*) INTO scheduled FROM (
            SELECT 1 FROM {schema}.jobs AS j
            WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id IS NULL
              AND j.available_at > now()
            LIMIT bound + 1
        ) AS s;
        IF scheduled > bound THEN
            SELECT count(*) INTO due FROM (
                SELECT 1 FROM {schema}.jobs AS j
                WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id IS NULL
                  AND j.available_at <= now()
                LIMIT bound + 1
            ) AS d;
        END IF;
    ELSE
        SELECT j.available_at INTO first_at FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id = group_tenant
        ORDER BY j.available_at LIMIT 1;
        SELECT count(*) INTO scheduled FROM (
            SELECT 1 FROM {schema}.jobs AS j
            WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id = group_tenant
              AND j.available_at > now()
            LIMIT bound + 1
        ) AS s;
        IF scheduled > bound THEN
            SELECT count(*) INTO due FROM (
                SELECT 1 FROM {schema}.jobs AS j
                WHERE j.status = 'pending' AND j.kind = group_kind AND j.tenant_id = group_tenant
                  AND j.available_at <= now()
                LIMIT bound + 1
            ) AS d;
        END IF;
    END IF;
    first_due_at := CASE WHEN first_at <= now() THEN first_at END;
END
$$;

-- Throughput over time from the finished minutes (folded, plus the deltas not yet
-- folded): a minute inside one bucket counts as a whole, O(minutes). A minute that a
-- bucket edge (or since) cuts, possible only for buckets that are not whole minutes,
-- counts its jobs through the completed_at indexes, for that minute only. Exact.
CREATE OR REPLACE FUNCTION {schema}.finished_counts(since timestamptz, bucket interval)
RETURNS TABLE (start timestamptz, status text, count bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    WITH minutes AS (
        SELECT m.minute, m.status, sum(m.n) AS n,
            m.minute >= since
            AND date_bin(bucket, m.minute, since)
                = date_bin(bucket, m.minute + interval '59.999999 seconds', since) AS whole
        FROM (
            SELECT f.minute, f.status, f.n
            FROM {schema}.job_finished_minutes AS f
            WHERE f.minute > since - interval '1 minute'
            UNION ALL
            SELECT d.minute, d.status, d.n
            FROM {schema}.job_count_deltas AS d
            WHERE d.minute > since - interval '1 minute'
        ) AS m
        GROUP BY m.minute, m.status
    ),
    counted AS (
        SELECT date_bin(bucket, w.minute, since) AS start, w.status, w.n
        FROM minutes AS w
        WHERE w.whole
        UNION ALL
        SELECT date_bin(bucket, j.completed_at, since), j.status, 1
        FROM (SELECT DISTINCT c.minute FROM minutes AS c WHERE NOT c.whole) AS cut
        CROSS JOIN LATERAL (
            SELECT s.completed_at, s.status
            FROM {schema}.jobs AS s
            WHERE s.status = 'succeeded'
              AND s.completed_at >= greatest(cut.minute, since)
              AND s.completed_at < cut.minute + interval '1 minute'
            UNION ALL
            SELECT u.completed_at, u.status
            FROM {schema}.jobs AS u
            WHERE u.status IN ('failed', 'dead', 'cancelled')
              AND u.completed_at >= greatest(cut.minute, since)
              AND u.completed_at < cut.minute + interval '1 minute'
        ) AS j
    )
    SELECT c.start, c.status, sum(c.n)::bigint
    FROM counted AS c
    GROUP BY c.start, c.status
    HAVING sum(c.n) > 0
$$;

-- The totals of the jobs already in the table (the triggers above count from here on;
-- creating them locked out writers until this migration commits).
INSERT INTO {schema}.job_counts (kind, tenant_id, status, n)
SELECT j.kind, j.tenant_id, j.status, count(*)
FROM {schema}.jobs AS j
GROUP BY 1, 2, 3;

INSERT INTO {schema}.job_finished_minutes (minute, status, n)
SELECT {schema}.finished_minute(j.status, j.completed_at) AS minute, j.status, count(*)
FROM {schema}.jobs AS j
WHERE {schema}.finished_minute(j.status, j.completed_at) IS NOT NULL
GROUP BY 1, 2;
