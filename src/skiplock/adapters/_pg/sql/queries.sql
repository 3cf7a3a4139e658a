-- Named queries shared by every PostgreSQL adapter.
--
-- A block starts with "-- name: <name>" and runs to the next header. Parameters are
-- written once as :name (converted per driver at load time); {schema} is the quoted
-- schema name; {_fragment} inserts the block named "_fragment". Queries that return jobs
-- alias the jobs table as j.

-- name: _job_columns
j.id, j.kind, j.tenant_id, j.payload::text AS payload, j.status, j.priority,
j.available_at, j.created_at, j.claimed_at, j.claimed_by, j.attempts, j.max_attempts,
j.last_error, j.completed_at, j.idempotency_key, j.trace_context::text AS trace_context,
j.claims

-- name: _job_filter
(:ids::bigint[] IS NULL OR j.id = ANY(:ids::bigint[]))
AND (:states::text[] IS NULL OR j.status = ANY(:states::text[]))
AND (:kinds::text[] IS NULL OR j.kind = ANY(:kinds::text[]))
AND (:tenants::text[] IS NULL OR j.tenant_id = ANY(:tenants::text[]))
AND (:priority_min::int IS NULL OR j.priority >= :priority_min::int)
AND (:priority_max::int IS NULL OR j.priority <= :priority_max::int)

-- name: _claimable
j.status = 'pending'
AND j.available_at <= now()
AND (:tenants::text[] IS NULL OR j.tenant_id = ANY(:tenants::text[]))
AND NOT EXISTS (
    SELECT 1
    FROM unnest(:excluded_pair_kinds::text[], :excluded_pair_tenants::text[]) AS x (kind, tenant_id)
    WHERE x.kind = j.kind AND x.tenant_id IS NOT DISTINCT FROM j.tenant_id
)

-- ---- migrations -------------------------------------------------------------------

-- name: migration_lock
SELECT pg_advisory_xact_lock(:key::bigint);

-- name: migration_probe
SELECT to_regclass(:version_table::text) IS NOT NULL AS installed;

-- name: applied_migrations
SELECT version, name FROM {schema}.schema_migrations ORDER BY version;

-- name: record_migration
INSERT INTO {schema}.schema_migrations (version, name) VALUES (:version::int, :name::text);

-- ---- jobs -------------------------------------------------------------------------

-- name: now
SELECT now() AS now;

-- name: enqueue
-- Ids are drawn from the identity sequence in request order so each result row maps
-- back to its request (ord), whether it was inserted or hit an existing key. Rows go in
-- in key order: two batches sharing keys wait for each other in one order, never in a
-- deadlock.
WITH input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id, u.*
    FROM unnest(
        :kinds::text[], :tenants::text[], :payloads::text[], :priorities::int[],
        :available_ats::timestamptz[], :delays::interval[], :max_attempts::int[],
        :idempotency_keys::text[], :trace_contexts::text[]
    ) WITH ORDINALITY AS u (
        kind, tenant_id, payload, priority, available_at, delay, max_attempts,
        idempotency_key, trace_context, ord
    )
    ORDER BY u.ord
),
inserted AS (
    INSERT INTO {schema}.jobs AS j (
        id, kind, tenant_id, payload, priority, available_at, max_attempts,
        idempotency_key, trace_context
    )
    SELECT
        i.id, i.kind, i.tenant_id, i.payload::jsonb, i.priority,
        coalesce(i.available_at, now() + i.delay, now()), i.max_attempts,
        i.idempotency_key, i.trace_context::jsonb
    FROM input AS i
    ORDER BY i.idempotency_key NULLS LAST, i.ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id
)
SELECT input.ord, inserted.id
FROM input LEFT JOIN inserted ON inserted.id = input.id
ORDER BY input.ord;

-- name: enqueue_one
-- One job without an idempotency key: a plain single-row insert (no arrays, no CTE).
INSERT INTO {schema}.jobs AS j (
    kind, tenant_id, payload, priority, available_at, max_attempts, trace_context
)
VALUES (
    :kind::text, :tenant::text, CAST(:payload::text AS jsonb), :priority::int,
    coalesce(:available_at::timestamptz, now() + :delay::interval, now()),
    :max_attempts::int, CAST(:trace_context::text AS jsonb)
)
RETURNING j.id;

-- name: reserve_ids
-- Job ids for a COPY-based bulk enqueue, with the transaction's now().
SELECT array_agg(r.id ORDER BY r.id) AS ids, now() AS now
FROM (
    SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id
    FROM generate_series(1, :n::int)
) AS r;

-- name: ids_by_idempotency_key
SELECT j.id, j.idempotency_key
FROM {schema}.jobs AS j
WHERE j.idempotency_key = ANY(:keys::text[]);

-- name: claim
-- One statement: lock up to :limit due jobs in claim order, skipping rows other claimers
-- hold, and mark them running (attempts and claims count at claim).
WITH picked AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs AS j
    WHERE {_claimable}
      AND (:kinds::text[] IS NULL OR j.kind = ANY(:kinds::text[]))
      AND j.kind <> ALL(:excluded_kinds::text[])
    ORDER BY j.priority DESC, j.available_at, j.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET status = 'running', claimed_by = :worker_id, claimed_at = now(), attempts = j.attempts + 1,
    claims = j.claims + 1
FROM picked
WHERE j.id = picked.id
RETURNING {_job_columns};

-- name: claim_capped
-- Like claim, with kinds that have a cap (per-node slots, cluster limits): each capped
-- kind is locked separately up to its cap, the other kinds together up to :limit, and
-- the best :limit of those are claimed. The rows locked but not chosen are released at
-- the end of the statement's transaction.
WITH capped AS MATERIALIZED (
    SELECT c.id, c.priority, c.available_at
    FROM unnest(:capped_kinds::text[], :caps::int[]) AS cap (kind, n)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.available_at
        FROM {schema}.jobs AS j
        WHERE {_claimable} AND j.kind = cap.kind
        ORDER BY j.priority DESC, j.available_at, j.id
        LIMIT cap.n
        FOR UPDATE SKIP LOCKED
    ) AS c
),
uncapped AS MATERIALIZED (
    SELECT j.id, j.priority, j.available_at
    FROM {schema}.jobs AS j
    WHERE {_claimable}
      AND (:kinds::text[] IS NULL OR j.kind = ANY(:kinds::text[]))
      AND j.kind <> ALL(:excluded_kinds::text[])
      AND j.kind <> ALL(:capped_kinds::text[])
    ORDER BY j.priority DESC, j.available_at, j.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
),
chosen AS MATERIALIZED (
    SELECT u.id
    FROM (SELECT * FROM capped UNION ALL SELECT * FROM uncapped) AS u
    ORDER BY u.priority DESC, u.available_at, u.id
    LIMIT :limit
)
UPDATE {schema}.jobs AS j
SET status = 'running', claimed_by = :worker_id, claimed_at = now(), attempts = j.attempts + 1,
    claims = j.claims + 1
FROM chosen
WHERE j.id = chosen.id
RETURNING {_job_columns};

-- name: lock_kinds
-- Transaction-level advisory locks, taken in the order given (callers sort the keys so
-- two claimers never wait on each other in opposite orders).
SELECT pg_advisory_xact_lock(k.key)
FROM unnest(:keys::bigint[]) WITH ORDINALITY AS k (key, ord)
ORDER BY k.ord;

-- name: running_counts
SELECT j.kind, count(*)::int AS running
FROM {schema}.jobs AS j
WHERE j.status = 'running' AND j.kind = ANY(:kinds::text[])
GROUP BY j.kind;

-- name: _complete_set
-- Success clears the error; an outcome without error text keeps the previous one.
SET status = u.status,
    attempts = j.attempts - u.refund,
    available_at = CASE WHEN u.status = 'pending' THEN now() + u.delay ELSE j.available_at END,
    completed_at = CASE WHEN u.status = 'pending' THEN NULL ELSE now() END,
    claimed_by = CASE WHEN u.status = 'pending' THEN NULL ELSE j.claimed_by END,
    claimed_at = CASE WHEN u.status = 'pending' THEN NULL ELSE j.claimed_at END,
    last_error = CASE
        WHEN u.status = 'succeeded' THEN NULL
        WHEN u.set_error THEN u.error
        ELSE j.last_error
    END

-- name: _complete_fence
-- Fenced: only a job still running under the same worker and claim count changes (the
-- count never repeats, so a stale lease of the same worker cannot match).
WHERE j.id = u.id
  AND j.status = 'running'
  AND j.claimed_by = u.worker
  AND j.claims = u.claim

-- name: complete
-- A batch of outcomes in one statement.
UPDATE {schema}.jobs AS j
{_complete_set}
FROM unnest(
    :ids::bigint[], :workers::text[], :claims::int[], :statuses::text[],
    :delays::interval[], :errors::text[], :set_errors::bool[], :refunds::int[]
) WITH ORDINALITY AS u (id, worker, claim, status, delay, error, set_error, refund, ord)
{_complete_fence}
RETURNING u.ord;

-- name: complete_one
-- One outcome (a transactional job's completion): scalar parameters, no arrays to build.
UPDATE {schema}.jobs AS j
{_complete_set}
FROM (
    SELECT :id::bigint AS id, :worker::text AS worker, :claim::int AS claim,
        :status::text AS status, :delay::interval AS delay, :error::text AS error,
        :set_error::bool AS set_error, :refund::int AS refund, 1::bigint AS ord
) AS u
{_complete_fence}
RETURNING u.ord;

-- name: get_job
SELECT {_job_columns} FROM {schema}.jobs AS j WHERE j.id = :id::bigint;

-- name: list_jobs_asc
SELECT {_job_columns}
FROM {schema}.jobs AS j
WHERE {_job_filter}
  AND (:after_id::bigint IS NULL OR j.id > :after_id::bigint)
ORDER BY j.id
LIMIT :limit;

-- name: list_jobs_desc
SELECT {_job_columns}
FROM {schema}.jobs AS j
WHERE {_job_filter}
  AND (:after_id::bigint IS NULL OR j.id < :after_id::bigint)
ORDER BY j.id DESC
LIMIT :limit;

-- name: counts
SELECT j.status, j.kind, j.tenant_id, count(*)::bigint AS count
FROM {schema}.jobs AS j
GROUP BY j.status, j.kind, j.tenant_id;

-- name: apply
-- Operator transition: :sources/:targets is the transition table's slice for the event
-- (computed by the core). Back to pending means due now with the claim cleared.
UPDATE {schema}.jobs AS j
SET status = t.target,
    available_at = CASE WHEN t.target = 'pending' THEN now() ELSE j.available_at END,
    claimed_by = CASE WHEN t.target = 'pending' THEN NULL ELSE j.claimed_by END,
    claimed_at = CASE WHEN t.target = 'pending' THEN NULL ELSE j.claimed_at END,
    completed_at = CASE WHEN t.target = 'pending' THEN NULL ELSE now() END,
    attempts = CASE WHEN :reset_attempts::bool THEN 0 ELSE j.attempts END
FROM unnest(:sources::text[], :targets::text[]) AS t (source, target)
WHERE j.status = t.source AND {_job_filter}
RETURNING j.id;

-- name: delete
DELETE FROM {schema}.jobs AS j
WHERE j.status <> 'running' AND {_job_filter}
RETURNING {_job_columns};

-- ---- workers and maintenance ---------------------------------------------------------

-- name: register_worker
INSERT INTO {schema}.workers AS w (id, host, pid, kinds, tenants)
VALUES (:id, :host, :pid::int, :kinds::text[], :tenants::text[])
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, kinds = excluded.kinds,
    tenants = excluded.tenants, heartbeat_at = now();

-- name: heartbeat
-- No row when the worker row is gone (nothing refreshed); else one row with the ids
-- among :running that no longer run under this worker (missing ones included).
WITH w AS (
    UPDATE {schema}.workers SET heartbeat_at = now() WHERE id = :id RETURNING id
)
SELECT coalesce(
    (
        SELECT array_agg(r.id ORDER BY r.id)
        FROM (SELECT DISTINCT unnest(:running::bigint[]) AS id) AS r
        WHERE NOT EXISTS (
            SELECT 1
            FROM {schema}.jobs AS j
            WHERE j.id = r.id AND j.status = 'running' AND j.claimed_by = w.id
        )
    ),
    '{}'::bigint[]
) AS gone
FROM w;

-- name: unregister_worker
DELETE FROM {schema}.workers WHERE id = :id;

-- name: try_lock
SELECT pg_try_advisory_xact_lock(:key::bigint) AS locked;

-- name: recover_stale
-- Running jobs whose worker stopped heart-beating (or whose worker row is gone): back to
-- pending with attempts unchanged, or dead when no attempt is left. The mark is
-- prepended to the previous error.
WITH stale AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs AS j
    LEFT JOIN {schema}.workers AS w ON w.id = j.claimed_by
    LEFT JOIN unnest(:ttl_kinds::text[], :ttls::interval[]) AS t (kind, ttl) ON t.kind = j.kind
    WHERE j.status = 'running'
      AND (w.id IS NULL OR w.heartbeat_at < now() - coalesce(t.ttl, :default_ttl::interval))
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
    claimed_by = CASE WHEN j.attempts >= j.max_attempts THEN j.claimed_by END,
    claimed_at = CASE WHEN j.attempts >= j.max_attempts THEN j.claimed_at END,
    completed_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    last_error = left(:mark::text || coalesce(' ' || j.last_error, ''), :max_error::int)
FROM stale
WHERE j.id = stale.id
RETURNING j.id;

-- name: delete_silent_workers
-- After a recovery in the same transaction: rows of workers silent for longer than
-- every TTL (their jobs were just recovered). A heartbeat that commits meanwhile keeps
-- its row (the delete re-checks the row it waited for).
DELETE FROM {schema}.workers AS w
WHERE w.heartbeat_at < now() - :longest::interval;

-- name: try_maintenance
-- Take a maintenance run: the row lock makes one of concurrent callers win per period
-- (a loser waits for the winner's row and re-checks it). :always grants a period <= 0
-- even to a caller whose now() is older than the last run.
INSERT INTO {schema}.maintenance AS m (name, last_run_at)
VALUES (:name::text, now())
ON CONFLICT (name) DO UPDATE
SET last_run_at = now()
WHERE :always::bool OR m.last_run_at <= now() - :every::interval
RETURNING true AS granted;

-- name: set_statement_timeout
-- :value is a setting text such as '1500ms'; :local limits it to the open transaction.
SELECT set_config('statement_timeout', :value::text, :local::bool) AS value;

-- name: swap_statement_timeout
-- Set the session's statement_timeout and return the previous value (to restore it).
WITH p AS MATERIALIZED (SELECT current_setting('statement_timeout') AS previous)
SELECT p.previous, set_config('statement_timeout', :value::text, false) AS value
FROM p;

-- name: purge
-- One retention batch: delete (and optionally archive) the oldest succeeded jobs.
WITH doomed AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs AS j
    WHERE j.status = 'succeeded' AND j.completed_at < now() - :older_than::interval
    ORDER BY j.completed_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {schema}.jobs AS j
    USING doomed
    WHERE j.id = doomed.id
    RETURNING j.*
),
archived AS (
    INSERT INTO {schema}.jobs_archive (
        id, kind, tenant_id, payload, status, priority, available_at, created_at,
        claimed_at, claimed_by, attempts, max_attempts, last_error, completed_at,
        idempotency_key, trace_context, claims
    )
    SELECT
        d.id, d.kind, d.tenant_id, d.payload, d.status, d.priority, d.available_at,
        d.created_at, d.claimed_at, d.claimed_by, d.attempts, d.max_attempts, d.last_error,
        d.completed_at, d.idempotency_key, d.trace_context, d.claims
    FROM deleted AS d
    WHERE :archive::bool
    ON CONFLICT (id) DO NOTHING
)
SELECT count(*)::int AS purged FROM deleted;
