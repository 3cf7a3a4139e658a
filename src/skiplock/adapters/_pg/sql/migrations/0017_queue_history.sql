-- 0017: the queue over time (the dashboard's charts, docs/dashboard-pages.md "Charts"): the
-- finished minutes get the kind (throughput per kind), and the counts roll-up takes one
-- sample per minute and kind of the backlog and the claim latency. Reads stay
-- O(minutes x kinds), never O(jobs). Placeholders: {schema} (quoted schema name).

-- Rollups wait here (they write this table); one that already wrote it has committed,
-- so the rebuild below sees what it folded.
LOCK TABLE {schema}.job_finished_minutes IN ACCESS EXCLUSIVE MODE;

ALTER TABLE {schema}.job_finished_minutes
    DROP CONSTRAINT job_finished_minutes_pkey,
    ADD COLUMN kind text;

-- The folded totals per kind: the finished jobs minus the deltas not yet folded, read
-- in one statement (one snapshot: a job's change and its delta commit together). One
-- scan of jobs, as migration 0011's backfill.
DELETE FROM {schema}.job_finished_minutes;
INSERT INTO {schema}.job_finished_minutes (minute, status, n, kind)
SELECT c.minute, c.status, sum(c.n), c.kind
FROM (
    SELECT {schema}.finished_minute(j.status, j.completed_at) AS minute, j.status,
           count(*) AS n, j.kind
    FROM {schema}.jobs AS j
    WHERE {schema}.finished_minute(j.status, j.completed_at) IS NOT NULL
    GROUP BY 1, 2, 4
    UNION ALL
    SELECT d.minute, d.status, -sum(d.n), d.kind
    FROM {schema}.job_count_deltas AS d
    WHERE d.minute IS NOT NULL
    GROUP BY 1, 2, 4
) AS c
GROUP BY c.minute, c.status, c.kind
HAVING sum(c.n) <> 0;

ALTER TABLE {schema}.job_finished_minutes
    ALTER COLUMN kind SET NOT NULL,
    ADD PRIMARY KEY (minute, kind, status);

-- One row per sampled minute and kind ('' sums every kind and is written for every
-- sampled minute, so a minute without it was not sampled): pending, due (a lower bound
-- when due_bounded, as the health report's split) and running jobs, and the claim
-- latency (claimed_at - available_at, seconds) of the latest jobs that succeeded in the
-- minute before (claims of them). Kept two days (sample_queues removes older ones).
CREATE TABLE {schema}.queue_samples (
    minute timestamptz NOT NULL,
    kind text NOT NULL,
    pending bigint NOT NULL,
    due bigint NOT NULL,
    due_bounded boolean NOT NULL,
    running bigint NOT NULL,
    claims integer NOT NULL,
    claim_p50 float8,
    claim_p99 float8,
    PRIMARY KEY (minute, kind)
);

-- The fold, as in 0011, with the finished minutes per kind.
CREATE OR REPLACE FUNCTION {schema}.roll_up_job_counts(lock_key bigint)
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
    zero_minute_kinds text[];
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
        INSERT INTO {schema}.job_finished_minutes AS m (minute, kind, status, n)
        SELECT g.minute, g.kind, g.status, sum(g.n)
        FROM gone AS g
        WHERE g.minute IS NOT NULL
        GROUP BY 1, 2, 3
        ON CONFLICT (minute, kind, status) DO UPDATE SET n = m.n + EXCLUDED.n
        RETURNING m.minute, m.kind, m.status, m.n
    )
    SELECT
        (SELECT count(*) FROM gone),
        (SELECT array_agg(t.kind) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(t.tenant_id) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(t.status) FROM totals AS t WHERE t.n = 0),
        (SELECT array_agg(f.minute) FROM minutes AS f WHERE f.n = 0),
        (SELECT array_agg(f.kind) FROM minutes AS f WHERE f.n = 0),
        (SELECT array_agg(f.status) FROM minutes AS f WHERE f.n = 0)
    INTO folded, zero_kinds, zero_tenants, zero_states, zero_minutes, zero_minute_kinds,
        zero_minute_states;
    IF zero_kinds IS NOT NULL THEN
        DELETE FROM {schema}.job_counts AS c
        USING unnest(zero_kinds, zero_tenants, zero_states) AS z (kind, tenant_id, status)
        WHERE c.kind = z.kind AND c.tenant_id IS NOT DISTINCT FROM z.tenant_id
          AND c.status = z.status AND c.n = 0;
    END IF;
    IF zero_minutes IS NOT NULL THEN
        DELETE FROM {schema}.job_finished_minutes AS m
        USING unnest(zero_minutes, zero_minute_kinds, zero_minute_states)
            AS z (minute, kind, status)
        WHERE m.minute = z.minute AND m.kind = z.kind AND m.status = z.status
          AND m.n = 0;
    END IF;
    RETURN folded;
END
$$;

-- Throughput over time per kind from the finished minutes (folded, plus the deltas not
-- yet folded): a minute inside one bucket counts as a whole, O(minutes x kinds). A
-- minute that a bucket edge (or since) cuts, possible only for buckets that are not whole
-- minutes, counts its jobs through the completed_at indexes, for that minute only. Exact.
CREATE FUNCTION {schema}.finished_kind_counts(since timestamptz, bucket interval)
RETURNS TABLE (start timestamptz, kind text, status text, count bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    -- Whole-minute buckets from the start of a minute (every chart of the dashboard):
    -- each minute lies in one bucket, so one aggregate over the minutes.
    (
        SELECT date_bin(bucket, m.minute, since), m.kind, m.status, sum(m.n)::bigint
        FROM (
            SELECT f.minute, f.kind, f.status, f.n
            FROM {schema}.job_finished_minutes AS f
            WHERE f.minute >= since
            UNION ALL
            SELECT d.minute, d.kind, d.status, d.n
            FROM {schema}.job_count_deltas AS d
            WHERE d.minute >= since
        ) AS m
        WHERE date_bin('1 minute', since, timestamptz '2000-01-01 00:00:00+00') = since
          AND extract(epoch FROM bucket) % 60 = 0
        GROUP BY 1, 2, 3
        HAVING sum(m.n) > 0
    )
    UNION ALL
    -- Other buckets: a minute that a bucket edge (or since) cuts is counted from its jobs.
    (
        WITH minutes AS (
            SELECT m.minute, m.kind, m.status, sum(m.n) AS n,
                m.minute >= since
                AND date_bin(bucket, m.minute, since)
                    = date_bin(bucket, m.minute + interval '59.999999 seconds', since)
                    AS whole
            FROM (
                SELECT f.minute, f.kind, f.status, f.n
                FROM {schema}.job_finished_minutes AS f
                WHERE f.minute > since - interval '1 minute'
                UNION ALL
                SELECT d.minute, d.kind, d.status, d.n
                FROM {schema}.job_count_deltas AS d
                WHERE d.minute > since - interval '1 minute'
            ) AS m
            WHERE NOT (
                date_bin('1 minute', since, timestamptz '2000-01-01 00:00:00+00') = since
                AND extract(epoch FROM bucket) % 60 = 0
            )
            GROUP BY m.minute, m.kind, m.status
        ),
        counted AS (
            SELECT date_bin(bucket, w.minute, since) AS start, w.kind, w.status, w.n
            FROM minutes AS w
            WHERE w.whole
            UNION ALL
            SELECT date_bin(bucket, j.completed_at, since), j.kind, j.status, 1
            FROM (SELECT DISTINCT c.minute FROM minutes AS c WHERE NOT c.whole) AS cut
            CROSS JOIN LATERAL (
                SELECT s.completed_at, s.kind, s.status
                FROM {schema}.jobs AS s
                WHERE s.status = 'succeeded'
                  AND s.completed_at >= greatest(cut.minute, since)
                  AND s.completed_at < cut.minute + interval '1 minute'
                UNION ALL
                SELECT u.completed_at, u.kind, u.status
                FROM {schema}.jobs AS u
                WHERE u.status IN ('failed', 'dead', 'cancelled')
                  AND u.completed_at >= greatest(cut.minute, since)
                  AND u.completed_at < cut.minute + interval '1 minute'
            ) AS j
        )
        SELECT c.start, c.kind, c.status, sum(c.n)::bigint
        FROM counted AS c
        GROUP BY c.start, c.kind, c.status
        HAVING sum(c.n) > 0
    )
$$;

-- 0011's reader, kept for the previous release's processes during a rolling upgrade.
CREATE OR REPLACE FUNCTION {schema}.finished_counts(since timestamptz, bucket interval)
RETURNS TABLE (start timestamptz, status text, count bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT f.start, f.status, sum(f.count)::bigint
    FROM {schema}.finished_kind_counts(since, bucket) AS f
    GROUP BY f.start, f.status
$$;

-- This minute's samples, unless taken (then 0): per kind with pending or running jobs
-- or a sampled claim, and the '' row; the due/scheduled split bounded per (kind,
-- tenant) by pending_probe (bound), the claim latency from the latest pickup_limit jobs
-- that succeeded in the minute before (a backward walk of
-- jobs_succeeded_completed_idx); samples older than keep are removed. O(groups +
-- pickup_limit + the minutes removed). Returns the rows written. The roll-up's caller
-- runs it while it holds the roll-up's lock (one session at a time).
CREATE FUNCTION {schema}.sample_queues(bound integer, pickup_limit integer, keep interval)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    this_minute timestamptz := date_bin(
        '1 minute', now(), timestamptz '2000-01-01 00:00:00+00'
    );
    written integer;
BEGIN
    IF EXISTS (
        SELECT 1 FROM {schema}.queue_samples AS s
        WHERE s.minute = this_minute AND s.kind = ''
    ) THEN
        RETURN 0;
    END IF;
    WITH totals AS (
        SELECT t.kind, t.tenant_id,
            coalesce(sum(t.n) FILTER (WHERE t.status = 'pending'), 0) AS pending,
            coalesce(sum(t.n) FILTER (WHERE t.status = 'running'), 0) AS running
        FROM (
            SELECT c.kind, c.tenant_id, c.status, c.n
            FROM {schema}.job_counts AS c
            WHERE c.status IN ('pending', 'running')
            UNION ALL
            SELECT d.kind, d.tenant_id, d.status, d.n
            FROM {schema}.job_count_deltas AS d
            WHERE d.status IN ('pending', 'running')
        ) AS t
        GROUP BY t.kind, t.tenant_id
    ),
    groups AS (
        SELECT g.kind, g.pending, g.running,
            CASE WHEN p.scheduled IS NULL THEN 0
                 WHEN p.scheduled <= bound THEN g.pending - p.scheduled
                 WHEN p.due <= bound THEN p.due
                 ELSE bound
            END AS due,
            coalesce(p.scheduled > bound AND p.due > bound, false) AS bounded
        FROM totals AS g
        LEFT JOIN LATERAL {schema}.pending_probe(
            g.kind, g.tenant_id, CASE WHEN g.pending > 0 THEN bound END
        ) AS p ON true
        WHERE g.pending <> 0 OR g.running <> 0
    ),
    kinds AS (
        SELECT coalesce(g.kind, '') AS kind, sum(g.pending)::bigint AS pending,
            sum(g.due)::bigint AS due, coalesce(bool_or(g.bounded), false) AS bounded,
            sum(g.running)::bigint AS running
        FROM groups AS g
        GROUP BY GROUPING SETS ((g.kind), ())
    ),
    recent AS (
        SELECT j.kind,
            greatest(extract(epoch FROM j.claimed_at - j.available_at), 0)::float8 AS wait
        FROM {schema}.jobs AS j
        WHERE j.status = 'succeeded'
          AND j.completed_at >= this_minute - interval '1 minute'
          AND j.completed_at < this_minute
          AND j.claimed_at IS NOT NULL
        ORDER BY j.completed_at DESC
        LIMIT pickup_limit
    ),
    waits AS (
        SELECT coalesce(r.kind, '') AS kind, count(*)::integer AS claims,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY r.wait) AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY r.wait) AS p99
        FROM recent AS r
        GROUP BY GROUPING SETS ((r.kind), ())
    )
    INSERT INTO {schema}.queue_samples AS s
        (minute, kind, pending, due, due_bounded, running, claims, claim_p50, claim_p99)
    SELECT this_minute, coalesce(k.kind, w.kind), coalesce(k.pending, 0),
        coalesce(k.due, 0), coalesce(k.bounded, false), coalesce(k.running, 0),
        coalesce(w.claims, 0), w.p50, w.p99
    FROM kinds AS k
    FULL JOIN waits AS w ON w.kind = k.kind
    ON CONFLICT (minute, kind) DO NOTHING;
    GET DIAGNOSTICS written = ROW_COUNT;
    DELETE FROM {schema}.queue_samples AS s WHERE s.minute < this_minute - keep;
    RETURN written;
END
$$;

-- TRUNCATE of jobs (tests, a reset) empties the samples with the counts.
CREATE OR REPLACE FUNCTION {schema}.count_jobs_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.job_count_deltas;
    DELETE FROM {schema}.job_counts;
    DELETE FROM {schema}.job_finished_minutes;
    DELETE FROM {schema}.queue_samples;
    RETURN NULL;
END
$$;
