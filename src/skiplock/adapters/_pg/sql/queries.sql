-- Named queries shared by every PostgreSQL adapter.
--
-- A block starts with "-- name: <name>" and runs to the next header. Parameters are
-- written once as :name (converted per driver at load time); {schema} is the quoted
-- schema name; {_fragment} inserts the block named "_fragment". Queries that return jobs
-- alias the jobs table as j.

-- name: _job_fields
-- A timestamp Python cannot read (outside the core's {min_time} .. {max_time}: -infinity,
-- BC, year 10000 on; written by plain SQL) would fail the driver's fetch of every row
-- with it: it comes back NULL instead, and "unreadable" names it with its text, so the
-- row alone is refused when it is decoded.
j.id, j.kind, j.tenant_id, j.payload::text AS payload, j.status, j.priority,
CASE WHEN j.available_at BETWEEN {min_time} AND {max_time} THEN j.available_at END
    AS available_at,
CASE WHEN j.created_at BETWEEN {min_time} AND {max_time} THEN j.created_at END AS created_at,
CASE WHEN j.claimed_at BETWEEN {min_time} AND {max_time} THEN j.claimed_at END AS claimed_at,
j.claimed_by, j.attempts, j.max_attempts, j.last_error,
CASE WHEN j.completed_at BETWEEN {min_time} AND {max_time} THEN j.completed_at END
    AS completed_at,
j.idempotency_key, j.tenant_idempotency_key, j.trace_context::text AS trace_context,
j.claims, j.explicit_max_attempts, j.recovered, j.concurrency_key, j.concurrency_limit,
CASE WHEN j.started_at BETWEEN {min_time} AND {max_time} THEN j.started_at END AS started_at,
nullif(concat_ws('; ',
    CASE WHEN NOT j.available_at BETWEEN {min_time} AND {max_time}
        THEN 'available_at ' || j.available_at END,
    CASE WHEN NOT j.created_at BETWEEN {min_time} AND {max_time}
        THEN 'created_at ' || j.created_at END,
    CASE WHEN NOT j.claimed_at BETWEEN {min_time} AND {max_time}
        THEN 'claimed_at ' || j.claimed_at END,
    CASE WHEN NOT j.completed_at BETWEEN {min_time} AND {max_time}
        THEN 'completed_at ' || j.completed_at END,
    CASE WHEN NOT j.started_at BETWEEN {min_time} AND {max_time}
        THEN 'started_at ' || j.started_at END
), '') AS unreadable

-- name: _job_columns
-- A suspect: pending with the started mark its vanished worker's claim left. The result
-- and the recorded errors are read here only (admin reads), never by a claim (but for
-- the errors of claim_errors, asked for).
{_job_fields}, (j.status = 'pending' AND j.started) AS suspect,
j.result::text AS result, j.errors::text AS errors

-- name: _job_filter
(:ids::bigint[] IS NULL OR j.id = ANY(:ids::bigint[]))
AND (:states::text[] IS NULL OR j.status = ANY(:states::text[]))
AND (:kinds::text[] IS NULL OR j.kind = ANY(:kinds::text[]))
AND (:tenants::text[] IS NULL OR j.tenant_id = ANY(:tenants::text[]))
AND (:priority_min::int IS NULL OR j.priority >= :priority_min::int)
AND (:priority_max::int IS NULL OR j.priority <= :priority_max::int)
AND (:created_since::timestamptz IS NULL OR j.created_at >= :created_since::timestamptz)
AND (:created_before::timestamptz IS NULL OR j.created_at < :created_before::timestamptz)
AND (:available_since::timestamptz IS NULL OR j.available_at >= :available_since::timestamptz)
AND (:available_before::timestamptz IS NULL OR j.available_at < :available_before::timestamptz)
AND (:payload::jsonb IS NULL OR j.payload @> :payload::jsonb)
AND (:error::text IS NULL OR strpos(lower(coalesce(j.last_error, '')), lower(:error::text)) > 0
    OR EXISTS (
        SELECT FROM jsonb_array_elements(
            CASE jsonb_typeof(j.errors) WHEN 'array' THEN j.errors END
        ) AS e (v)
        WHERE strpos(lower(e.v ->> 'error'), lower(:error::text)) > 0
    ))
AND (:idempotency_key::text IS NULL OR j.idempotency_key = :idempotency_key::text
    OR j.tenant_idempotency_key = :idempotency_key::text)

-- name: _claim_heartbeat
-- A claim that takes jobs is also a heartbeat of its worker (if registered), at the same
-- now() as claimed_at: stale recovery never takes a job younger than the heartbeat. A
-- claim that takes nothing writes nothing, so an idle poll stays read-only.
beat AS (
    UPDATE {schema}.workers AS w
    SET heartbeat_at = now()
    WHERE w.id = :worker_id AND EXISTS (SELECT 1 FROM chosen)
)

-- name: _claim_charged
-- chosen: the ids to claim with their rank n in claim order and whether each is a
-- suspect. The first :start_now start now (attempts += 1, started mark set) — unless a
-- suspect is among them: then it starts alone (core.charged_positions is the rule).
-- The first suspect's rank is an uncorrelated subquery, computed once per claim.
charged AS MATERIALIZED (
    SELECT c.id, c.suspect,
        coalesce(
            c.n = (
                SELECT min(s.n)
                FROM chosen AS s
                WHERE s.suspect AND (:start_now::int IS NULL OR s.n <= :start_now::int)
            ),
            :start_now::int IS NULL OR c.n <= :start_now::int
        ) AS start
    FROM chosen AS c
)

-- name: _claim_update
-- The rest are held until start(). A job whose max_attempts was not chosen at enqueue
-- takes the claiming worker's value for its kind, if given. Each job is returned with
-- whether it was a suspect before this claim and whether this claim charged it. The
-- counters saturate: a row at integer's maximum (plain SQL) must not fail the claim of
-- the whole batch; it is claimed, then buried as undecodable (core.counter_problem).
UPDATE {schema}.jobs AS j
SET status = 'running', claimed_by = :worker_id, claimed_at = now(),
    claims = CASE WHEN j.claims < {max_int4} THEN j.claims + 1 ELSE j.claims END,
    attempts = CASE
        WHEN c.start AND j.attempts < {max_int4} THEN j.attempts + 1 ELSE j.attempts
    END,
    started = c.start,
    started_at = CASE WHEN c.start THEN coalesce(j.started_at, now()) ELSE j.started_at END,
    max_attempts = CASE
        WHEN j.explicit_max_attempts THEN j.max_attempts
        ELSE coalesce(
            (:policy_max_attempts::int[])[array_position(:policy_kinds::text[], j.kind)],
            j.max_attempts
        )
    END
FROM charged AS c
WHERE j.id = c.id
RETURNING {_job_fields}, c.suspect, c.start AS charged

-- name: _audit_write
-- The audit trail (J10): a statement that changes jobs and records them builds "events"
-- (job_id, kind, tenant_id, action, actor, at, details; action NULL for a change that
-- is not audited) and writes them to the audit table in the same statement, unless
-- :audit_table is false: then an audit sink records the events the statement returns.
audited AS (
    INSERT INTO {schema}.audit (at, job_id, kind, tenant_id, action, actor, details)
    SELECT e.at, e.job_id, e.kind, e.tenant_id, e.action, e.actor, e.details
    FROM events AS e
    WHERE :audit_table::bool AND e.action IS NOT NULL
)

-- name: _audit_columns
-- The events as returned for an audit sink (audit_action NULL: nothing to record).
CASE WHEN NOT :audit_table::bool THEN e.action END AS audit_action,
e.job_id AS audit_job_id, e.kind AS audit_kind, e.tenant_id AS audit_tenant,
e.actor AS audit_actor, e.at AS audit_at,
CASE WHEN NOT :audit_table::bool THEN e.details::text END AS audit_details

-- ---- migrations -------------------------------------------------------------------

-- name: migration_lock
SELECT pg_advisory_xact_lock(:key::bigint);

-- name: migration_probe
SELECT to_regclass(:version_table::text) IS NOT NULL AS installed;

-- name: applied_migrations
SELECT version, name FROM {schema}.schema_migrations ORDER BY version;

-- name: record_migration
INSERT INTO {schema}.schema_migrations (version, name) VALUES (:version::int, :name::text);

-- name: search_indexes
-- The opt-in search indexes found in the schema (docs/search.md, "The opt-in search
-- indexes"), by name: valid unless a build was interrupted (CREATE INDEX CONCURRENTLY
-- leaves an invalid index).
SELECT c.relname AS name, x.indisvalid AND x.indisready AS valid,
    pg_catalog.pg_relation_size(c.oid) AS bytes
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_index AS x ON x.indexrelid = c.oid
WHERE n.nspname = :schema_name::text AND c.relname = ANY(:names::text[]);

-- name: extension_state
-- An extension an opt-in index needs: the schema it is installed in (quoted; NULL if it
-- is not), whether the server has it, and whether this role may create it.
SELECT (
        SELECT e.extnamespace::regnamespace::text FROM pg_catalog.pg_extension AS e
        WHERE e.extname = :extension::text
    ) AS installed_in,
    EXISTS (
        SELECT FROM pg_catalog.pg_available_extensions AS a WHERE a.name = :extension::text
    ) AS available,
    current_database() AS database,
    current_user AS role,
    has_database_privilege(current_database(), 'CREATE')
        OR coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r
            WHERE r.rolname = current_user), false) AS may_create;

-- ---- jobs -------------------------------------------------------------------------

-- name: now
SELECT now() AS now;

-- name: next_due
-- The worker's next-due timer: the earliest available_at after now() among the pending
-- jobs of :kinds and :tenants (NULL: any). Bounded whatever the table holds: a loose walk
-- of jobs_claim_idx (priority DESC, available_at, id) over at most 64 priorities, each
-- reading at most 64 rows due after now(). When a priority's 64 rows hold no job of the
-- worker's, the last one's time is a bound (nothing of the worker's at that priority is
-- due before it) and the worker asks again then; with more than 64 priorities pending
-- the answer is NULL and the worker polls.
WITH RECURSIVE priorities (priority, n) AS (
    (
        SELECT j.priority, 1 FROM {schema}.jobs AS j
        WHERE j.status = 'pending'
        ORDER BY j.priority DESC
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.priority FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.priority < p.priority
        ORDER BY j.priority DESC
        LIMIT 1
    ), p.n + 1
    FROM priorities AS p
    WHERE p.priority IS NOT NULL AND p.n <= 64
)
SELECT
    CASE WHEN max(p.n) FILTER (WHERE p.priority IS NOT NULL) <= 64
        THEN min(coalesce(f.due, f.bound))
    END AS at,
    now() AS now
FROM priorities AS p
CROSS JOIN LATERAL (
    SELECT
        min(r.available_at) FILTER (WHERE r.mine) AS due,
        CASE WHEN count(*) = 64 THEN max(r.available_at) END AS bound
    FROM (
        SELECT j.available_at,
            (:kinds::text[] IS NULL OR j.kind = ANY(:kinds::text[]))
            AND (:tenants::text[] IS NULL OR j.tenant_id = ANY(:tenants::text[])) AS mine
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.priority = p.priority AND j.available_at > now()
        ORDER BY j.available_at, j.id
        LIMIT 64
    ) AS r
) AS f
WHERE p.priority IS NOT NULL;

-- name: _enqueue_input
-- The batch is one JSON array of rows (rows.enqueue_params). Ids are drawn from the
-- identity sequence in request order so each result row maps back to its request (ord),
-- whether it was inserted or hit an existing key. A key's scope (10) is NULL (global:
-- the key goes to idempotency_key) or its tenant (to tenant_idempotency_key); 11 and 12
-- are the concurrency key and its limit (absent: none).
input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id, u.*
    FROM (
        SELECT e.v->>0 AS kind, e.v->>1 AS tenant_id, e.v->>2 AS payload,
            (e.v->>3)::int AS priority, (e.v->>4)::timestamptz AS available_at,
            (e.v->>5)::bigint * interval '1 microsecond' AS delay,
            (e.v->>6)::int AS max_attempts, (e.v->>7)::bool AS explicit_max_attempts,
            e.v->>8 AS key, e.v->>9 AS trace_context, e.v->>10 AS key_scope,
            e.v->>11 AS concurrency_key, (e.v->>12)::int AS concurrency_limit, e.ord
        FROM jsonb_array_elements(:batch::jsonb) WITH ORDINALITY AS e (v, ord)
    ) AS u
    ORDER BY u.ord
)

-- name: _enqueue_insert
-- Rows go in in key order: two batches sharing keys wait for each other in one order,
-- never in a deadlock. ON CONFLICT without a target covers both key indexes. A key that
-- retention purged and remembers (idempotency_keys, one index probe per keyed row)
-- inserts nothing, like a key that exists.
INSERT INTO {schema}.jobs AS j (
    id, kind, tenant_id, payload, priority, available_at, max_attempts,
    explicit_max_attempts, idempotency_key, tenant_idempotency_key, trace_context,
    concurrency_key, concurrency_limit
)
SELECT
    i.id, i.kind, i.tenant_id, i.payload::jsonb, i.priority,
    coalesce(i.available_at, now() + i.delay, now()), i.max_attempts,
    i.explicit_max_attempts,
    CASE WHEN i.key_scope IS NULL THEN i.key END,
    CASE WHEN i.key_scope IS NOT NULL THEN i.key END,
    i.trace_context::jsonb, i.concurrency_key, i.concurrency_limit
FROM input AS i
WHERE i.key IS NULL OR NOT EXISTS (
    SELECT FROM {schema}.idempotency_keys AS r
    WHERE r.idempotency_key = i.key AND r.idempotency_scope IS NOT DISTINCT FROM i.key_scope
)
ORDER BY i.key NULLS LAST, i.key_scope NULLS FIRST, i.ord
ON CONFLICT DO NOTHING

-- name: enqueue
WITH {_enqueue_input},
inserted AS (
    {_enqueue_insert}
    RETURNING j.id
)
SELECT input.ord, inserted.id
FROM input LEFT JOIN inserted ON inserted.id = input.id
ORDER BY input.ord;

-- name: enqueue_audited
-- enqueue with an audit event per job created (J10), in the same statement.
WITH {_enqueue_input},
inserted AS (
    {_enqueue_insert}
    RETURNING j.id, j.kind, j.tenant_id, j.created_at
),
{_enqueued_events},
{_audit_write}
SELECT input.ord, e.job_id AS id, {_audit_columns}
FROM input LEFT JOIN events AS e ON e.job_id = input.id
ORDER BY input.ord;

-- name: _enqueue_new_insert
-- Jobs without idempotency keys (rows.enqueue_params), all new: a plain INSERT ... SELECT.
-- Ids come from the identity default, drawn in request order (ORDER BY e.ord), so they
-- ascend in request order. No id is drawn by name per row (nextval of
-- pg_get_serial_sequence looks the sequence up at every call).
INSERT INTO {schema}.jobs AS j (
    kind, tenant_id, payload, priority, available_at, max_attempts, explicit_max_attempts,
    trace_context, concurrency_key, concurrency_limit
)
SELECT e.v->>0, e.v->>1, CAST(e.v->>2 AS jsonb), (e.v->>3)::int,
    coalesce(
        (e.v->>4)::timestamptz, now() + (e.v->>5)::bigint * interval '1 microsecond', now()
    ),
    (e.v->>6)::int, (e.v->>7)::bool, CAST(e.v->>9 AS jsonb), e.v->>11, (e.v->>12)::int
FROM jsonb_array_elements(:batch::jsonb) WITH ORDINALITY AS e (v, ord)
ORDER BY e.ord

-- name: enqueue_new
-- One row: the new jobs' ids in request order, as one array.
WITH inserted AS (
    {_enqueue_new_insert}
    RETURNING j.id
)
SELECT array_agg(i.id ORDER BY i.id) AS ids FROM inserted AS i;

-- name: enqueue_new_audited
-- enqueue_new with an audit event per job (J10), in the same statement; a row per job,
-- in request order.
WITH inserted AS (
    {_enqueue_new_insert}
    RETURNING j.id, j.kind, j.tenant_id, j.created_at
),
{_enqueued_events},
{_audit_write}
SELECT e.job_id AS id, {_audit_columns} FROM events AS e ORDER BY e.job_id;

-- name: _enqueue_one_insert
INSERT INTO {schema}.jobs AS j (
    kind, tenant_id, payload, priority, available_at, max_attempts, explicit_max_attempts,
    trace_context, concurrency_key, concurrency_limit
)
VALUES (
    :kind::text, :tenant::text, CAST(:payload::text AS jsonb), :priority::int,
    coalesce(:available_at::timestamptz, now() + :delay_us::bigint * interval '1 microsecond', now()),
    :max_attempts::int, :explicit_max_attempts::bool, CAST(:trace_context::text AS jsonb),
    :concurrency_key::text, :concurrency_limit::int
)

-- name: enqueue_one
-- One job without an idempotency key: a plain single-row insert (no arrays, no CTE).
{_enqueue_one_insert}
RETURNING j.id, j.created_at;

-- name: enqueue_one_audited
-- enqueue_one with the job's audit event (J10), in the same statement.
WITH inserted AS (
    {_enqueue_one_insert}
    RETURNING j.id, j.kind, j.tenant_id, j.created_at
),
{_enqueued_events},
{_audit_write}
SELECT e.job_id AS id, {_audit_columns} FROM events AS e;

-- name: _enqueued_events
events AS (
    SELECT i.id AS job_id, i.kind, i.tenant_id, 'job_enqueued'::text AS action,
        :actor::text AS actor, i.created_at AS at, NULL::jsonb AS details
    FROM inserted AS i
)

-- name: audit_enqueued
-- The audit events of a COPY-based bulk enqueue (J10), in its transaction.
INSERT INTO {schema}.audit (at, job_id, kind, tenant_id, action, actor)
SELECT :at::timestamptz, u.job_id, u.kind, u.tenant_id, 'job_enqueued', :actor::text
FROM unnest(:ids::bigint[], :kinds::text[], :tenants::text[]) AS u (job_id, kind, tenant_id);

-- name: reserve_ids
-- Job ids for a COPY-based bulk enqueue, with the transaction's now().
SELECT array_agg(r.id ORDER BY r.id) AS ids, now() AS now
FROM (
    SELECT nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id
    FROM generate_series(1, :n::int)
) AS r;

-- name: ids_by_idempotency_key
-- The jobs holding any of :keys, globally or in a tenant's scope (the caller matches
-- each request's), then the purged jobs whose keys retention remembers (purged true).
-- Each branch is an index scan on the key, whatever the statistics say.
SELECT j.id, j.idempotency_key, NULL::text AS idempotency_scope, false AS purged
FROM {schema}.jobs AS j
WHERE j.idempotency_key = ANY(:keys::text[])
UNION ALL
SELECT j.id, j.tenant_idempotency_key, j.tenant_id, false
FROM {schema}.jobs AS j
WHERE j.tenant_idempotency_key = ANY(:keys::text[])
UNION ALL
SELECT r.job_id, r.idempotency_key, r.idempotency_scope, true
FROM {schema}.idempotency_keys AS r
WHERE r.idempotency_key = ANY(:keys::text[]);

-- name: _replace_pending
-- replace_pending: the pending jobs holding the keys of :batch (rows.enqueue_params; a
-- NULL scope is the global key, else the tenant's) take its payload, due time and
-- priority; a running or finished job is left alone. The row lock re-checks the status,
-- so a job claimed meanwhile is not replaced.
input AS (
    SELECT e.v->>8 AS key, e.v->>10 AS key_scope, e.v->>2 AS payload,
        (e.v->>3)::int AS priority, (e.v->>4)::timestamptz AS available_at,
        (e.v->>5)::bigint * interval '1 microsecond' AS delay, e.ord
    FROM jsonb_array_elements(:batch::jsonb) WITH ORDINALITY AS e (v, ord)
),
matched AS (
    SELECT j.id, i.ord
    FROM input AS i
    JOIN {schema}.jobs AS j ON i.key_scope IS NULL AND j.idempotency_key = i.key
    UNION ALL
    SELECT j.id, i.ord
    FROM input AS i
    JOIN {schema}.jobs AS j ON j.tenant_idempotency_key = i.key AND j.tenant_id = i.key_scope
),
old AS (
    SELECT j.id, j.payload, j.priority
    FROM {schema}.jobs AS j
    WHERE j.id IN (SELECT m.id FROM matched AS m) AND j.status = 'pending'
    ORDER BY j.id
    FOR UPDATE OF j
),
replaced AS (
    UPDATE {schema}.jobs AS j
    SET payload = i.payload::jsonb, priority = i.priority,
        available_at = coalesce(i.available_at, now() + i.delay, now())
    FROM old AS o
    JOIN matched AS m ON m.id = o.id
    JOIN input AS i ON i.ord = m.ord
    WHERE j.id = o.id AND j.status = 'pending'
    RETURNING j.id, j.kind, j.tenant_id, i.ord, o.payload AS old_payload,
        o.priority AS old_priority
)

-- name: replace_pending
WITH {_replace_pending}
SELECT r.ord, r.id FROM replaced AS r;

-- name: replace_pending_audited
-- replace_pending with a job_replaced event per job replaced (J10), in the same
-- statement; its details keep the payload and priority the job had before.
WITH {_replace_pending},
events AS (
    SELECT r.id AS job_id, r.kind, r.tenant_id, 'job_replaced'::text AS action,
        :actor::text AS actor, now() AS at,
        jsonb_build_object('payload', r.old_payload, 'priority', r.old_priority) AS details,
        r.ord
    FROM replaced AS r
),
{_audit_write}
SELECT e.ord, e.job_id AS id, {_audit_columns} FROM events AS e;

-- name: _claim_chosen
-- The jobs of a claim without caps: up to :limit due jobs locked in claim order,
-- skipping rows other claimers hold. The locking walk is claim_candidates (migrations
-- 0006, 0014): its plan is the ordered walk of the claim index whatever the statistics
-- say.
chosen AS MATERIALIZED (
    SELECT c.id, c.suspect,
        row_number() OVER (ORDER BY c.priority DESC, c.available_at, c.id) AS n
    FROM {schema}.claim_candidates(
        batch => :limit::int,
        only_kinds => :kinds::text[],
        excluded_kinds => :excluded_kinds::text[],
        only_tenants => :tenants::text[],
        excluded_pair_kinds => :excluded_pair_kinds::text[],
        excluded_pair_tenants => :excluded_pair_tenants::text[],
        excluded_tenants => :excluded_tenants::text[],
        capped_kinds => '{}', caps => '{}',
        pair_kinds => '{}', pair_tenants => '{}', pair_caps => '{}'
    ) AS c
)

-- name: _claim_capped_chosen
-- The jobs of a claim with capped kinds (per-node slots, cluster limits) and capped
-- (kind, tenant) pairs (token buckets): claim_candidates locks each capped kind and each
-- capped pair separately up to its cap, everything else together up to :limit. The
-- capped pairs (:pair_*) are also in :excluded_pair_*, so only their own lane can take
-- their jobs. The final choice keeps a capped kind within its cap in total (its pairs'
-- jobs included) and the best :limit overall: what taking the jobs one by one in claim
-- order would take. The rows locked but not chosen are released at the end of the
-- statement's transaction.
candidates AS MATERIALIZED (
    SELECT c.id, c.kind, c.priority, c.available_at, c.suspect
    FROM {schema}.claim_candidates(
        batch => :limit::int,
        only_kinds => :kinds::text[],
        excluded_kinds => :excluded_kinds::text[],
        only_tenants => :tenants::text[],
        excluded_pair_kinds => :excluded_pair_kinds::text[],
        excluded_pair_tenants => :excluded_pair_tenants::text[],
        excluded_tenants => :excluded_tenants::text[],
        capped_kinds => :capped_kinds::text[],
        caps => :caps::int[],
        pair_kinds => :pair_kinds::text[],
        pair_tenants => :pair_tenants::text[],
        pair_caps => :pair_caps::int[]
    ) AS c
),
ranked AS (
    SELECT c.*,
        row_number() OVER (
            PARTITION BY c.kind ORDER BY c.priority DESC, c.available_at, c.id
        ) AS kind_n
    FROM candidates AS c
),
chosen AS MATERIALIZED (
    SELECT r.id, r.suspect,
        row_number() OVER (ORDER BY r.priority DESC, r.available_at, r.id) AS n
    FROM ranked AS r
    LEFT JOIN unnest(:capped_kinds::text[], :caps::int[]) AS cap (kind, n) ON cap.kind = r.kind
    WHERE cap.n IS NULL OR r.kind_n <= cap.n
    ORDER BY r.priority DESC, r.available_at, r.id
    LIMIT :limit
)

-- name: claim
-- One statement: lock the jobs (_claim_chosen) and mark them running.
WITH {_claim_chosen},
{_claim_charged},
{_claim_heartbeat}
{_claim_update};

-- name: claim_errors
-- claim, each job returned with its recorded errors too (ClaimRequest.with_errors): a
-- variant of its own, so a claim that does not ask reads no more.
WITH {_claim_chosen},
{_claim_charged},
{_claim_heartbeat}
{_claim_update}, j.errors::text AS errors;

-- name: claim_capped
-- Like claim, with capped kinds and pairs (_claim_capped_chosen).
WITH {_claim_capped_chosen},
{_claim_charged},
{_claim_heartbeat}
{_claim_update};

-- name: claim_capped_errors
-- claim_capped, each job returned with its recorded errors too (as claim_errors).
WITH {_claim_capped_chosen},
{_claim_charged},
{_claim_heartbeat}
{_claim_update}, j.errors::text AS errors;

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

-- name: rate_buckets
-- The token buckets of rate-limited kinds (every tenant's) and of providers (NULL: all)
-- that are not full by now (a full one is as good as none), with the database clock:
-- read after the kinds' advisory locks were granted, so never before the last holder's
-- write. A row of NULLs carries the clock when there is no bucket. Rows: the pairs and
-- providers drawn from lately, never the jobs (the health snapshot reads them all).
WITH clock AS (SELECT clock_timestamp() AS now)
SELECT b.scope, b.name, nullif(b.tenant_id, '') AS tenant_id, b.tokens,
    extract(epoch FROM b.updated_at)::float8 AS updated, b.rps, b.burst,
    extract(epoch FROM c.now)::float8 AS now
FROM clock AS c
LEFT JOIN {schema}.rate_buckets AS b
    ON ((b.scope = 'pair' AND (:kinds::text[] IS NULL OR b.name = ANY(:kinds::text[])))
        OR (b.scope = 'provider'
            AND (:providers::text[] IS NULL OR b.name = ANY(:providers::text[]))))
    AND b.tokens + b.rps * extract(epoch FROM c.now - b.updated_at) < b.burst
ORDER BY b.scope, b.name, b.tenant_id;

-- name: charge_rate_buckets
-- Store the buckets a claim drew from (one row each), in the claim's transaction.
INSERT INTO {schema}.rate_buckets AS b (scope, name, tenant_id, tokens, updated_at, rps, burst)
SELECT u.scope, u.name, coalesce(u.tenant_id, ''), u.tokens, to_timestamp(u.updated),
    u.rps, u.burst
FROM unnest(
    :scopes::text[], :names::text[], :tenants::text[], :tokens::float8[],
    :updated::float8[], :rps::float8[], :bursts::int[]
) AS u (scope, name, tenant_id, tokens, updated, rps, burst)
ON CONFLICT (scope, name, tenant_id) DO UPDATE
SET tokens = excluded.tokens, updated_at = excluded.updated_at, rps = excluded.rps,
    burst = excluded.burst;

-- name: _paid
-- 1 when an outcome pays for its run's attempt (a held job started without a round
-- trip: nothing paid yet), else 0. Saturates at integer's maximum.
CASE WHEN u.ran AND NOT j.started AND j.attempts < {max_int4} THEN 1 ELSE 0 END

-- name: _complete_set
-- Success clears the error; an outcome without error text keeps the previous one.
-- Times are statement_timestamp(), not now(): inside a job's transaction now() is when
-- the transaction began, while the outcome belongs to when the job completed. Not
-- clock_timestamp(): one time per statement, so a batch's rows and a row's due time and
-- completed_at agree (and the update trigger's WHEN sees the same value).
SET status = u.status,
    -- An outcome of a run pays its attempt if nothing did yet (a held job started
    -- without a round trip); a release gives back what the start paid.
    -- attempts saturate at integer's maximum, so no row's value can fail the batch.
    attempts = greatest(j.attempts + {_paid} - u.refund, 0),
    started = false,
    recovered = false,
    available_at = CASE
        WHEN u.status = 'pending' THEN statement_timestamp() + u.delay
        ELSE j.available_at
    END,
    completed_at = CASE WHEN u.status = 'pending' THEN NULL ELSE statement_timestamp() END,
    claimed_by = CASE WHEN u.status = 'pending' THEN NULL ELSE j.claimed_by END,
    claimed_at = CASE WHEN u.status = 'pending' THEN NULL ELSE j.claimed_at END,
    last_error = CASE
        WHEN u.status = 'succeeded' THEN NULL
        WHEN u.set_error THEN u.error
        ELSE j.last_error
    END,
    -- X5. A job without a result and without a failure writes NULL, NULL and the value
    -- it had: no work beyond the row update itself. A held job whose run is paid here
    -- started under this claim.
    started_at = coalesce(j.started_at, CASE WHEN u.ran THEN j.claimed_at END),
    result = CAST(u.result AS jsonb),
    errors = CASE
        -- A failed attempt (Retry, Bury): error text, a run, no attempt given back.
        WHEN u.set_error AND u.ran AND u.refund = 0 THEN {schema}.recorded_errors(
            errors => j.errors,
            keep => {max_recorded_errors},
            attempt => j.attempts + {_paid},
            worker_id => u.worker,
            claimed_at => j.claimed_at,
            failed_at => statement_timestamp(),
            error => u.error
        )
        ELSE j.errors
    END

-- name: _lease_fence
-- Fenced: only a job still running under the same worker and claim count changes (the
-- count never repeats, so a stale lease of the same worker cannot match). Jobs are found
-- by primary key: status is tested so that no partial index of running jobs can serve
-- the test (status is never NULL, so this means = 'running'). Statistics taken when few
-- or no jobs ran make such an index look empty, and the planner read every running job
-- for each batch.
WHERE j.id = u.id
  AND j.status IS NOT DISTINCT FROM 'running'
  AND j.claimed_by = u.worker
  AND j.claims = u.claim

-- name: _complete_batch
-- The batch is one JSON array of rows (rows.COMPLETION_FIELDS): one parameter is far
-- cheaper for a driver to send than a typed array per field.
UPDATE {schema}.jobs AS j
{_complete_set}
FROM (
    SELECT (e.v->>0)::bigint AS id, e.v->>1 AS worker, (e.v->>2)::int AS claim,
        e.v->>3 AS status, (e.v->>4)::bigint * interval '1 microsecond' AS delay,
        e.v->>5 AS error, (e.v->>6)::bool AS set_error, (e.v->>7)::int AS refund,
        (e.v->>8)::bool AS ran, e.v->>9 AS result, e.ord
    -- Through an array: the planner reckons with 10 elements in an array it cannot see
    -- (100 rows for jsonb_array_elements), so every job is looked up by primary key
    -- however large the table, never hash-joined to a scan of all its running jobs.
    FROM unnest(ARRAY(
        SELECT b.v FROM jsonb_array_elements(:batch::jsonb) WITH ORDINALITY AS b (v, n)
        ORDER BY b.n
    )) WITH ORDINALITY AS e (v, ord)
) AS u
{_lease_fence}

-- name: complete
-- A batch of outcomes in one statement. One row: the positions (1-based) of the outcomes
-- applied, as one array (NULL when none was), not a row per outcome to fetch.
WITH done AS (
    {_complete_batch}
    RETURNING u.ord
)
SELECT array_agg(d.ord) AS applied FROM done AS d;

-- name: complete_audited
-- complete with an audit event per success (job_done) and per move to dead (job_dlq),
-- in the same statement (J10); retries and releases are not audited.
WITH changed AS (
    {_complete_batch}
    RETURNING u.ord, j.id, j.kind, j.tenant_id, j.status, j.last_error, j.attempts
),
events AS (
    SELECT c.ord, c.id AS job_id, c.kind, c.tenant_id,
        CASE c.status WHEN 'succeeded' THEN 'job_done' WHEN 'dead' THEN 'job_dlq' END
            AS action,
        :actor::text AS actor, statement_timestamp() AS at,
        CASE WHEN c.status = 'dead' THEN
            jsonb_build_object('error', c.last_error, 'attempts', c.attempts)
        END AS details
    FROM changed AS c
),
{_audit_write}
SELECT e.ord, {_audit_columns} FROM events AS e;

-- name: complete_one
-- One outcome (a transactional job's completion): scalar parameters, no arrays to build.
UPDATE {schema}.jobs AS j
{_complete_set}
FROM (
    SELECT :id::bigint AS id, :worker::text AS worker, :claim::int AS claim,
        :status::text AS status, :delay_us::bigint * interval '1 microsecond' AS delay,
        :error::text AS error,
        :set_error::bool AS set_error, :refund::int AS refund, :ran::bool AS ran,
        :result::text AS result, 1::bigint AS ord
) AS u
{_lease_fence}
RETURNING u.ord;

-- name: start
-- Held jobs begin: attempts += 1 where the lease still holds, unless a start already
-- paid for this claim (so charging is idempotent). A lease given twice starts
-- its job once (its first occurrence reports it); only equal leases can both match.
UPDATE {schema}.jobs AS j
SET attempts = j.attempts
        + CASE WHEN j.started OR j.attempts >= {max_int4} THEN 0 ELSE 1 END,
    started = true,
    started_at = coalesce(j.started_at, j.claimed_at)
FROM (
    SELECT DISTINCT ON (l.id, l.worker, l.claim) l.*
    FROM unnest(:ids::bigint[], :workers::text[], :claims::int[])
        WITH ORDINALITY AS l (id, worker, claim, ord)
    ORDER BY l.id, l.worker, l.claim, l.ord
) AS u
{_lease_fence}
RETURNING u.ord;

-- name: get_job
SELECT {_job_columns} FROM {schema}.jobs AS j WHERE j.id = :id::bigint;

-- name: list_jobs
-- One keyset page (list_job_page, migrations 0012 and 0022: index walks, each bounded by
-- :budget rows read): the page's jobs in order, then, when a walk stopped at its budget
-- before the page was full, one row whose job columns are NULL and whose resume_after
-- is the id to continue after.
SELECT {_job_columns}, p.resume_after
FROM {schema}.list_job_page(
    :ids::bigint[], :states::text[], :kinds::text[], :tenants::text[],
    :priority_min::int, :priority_max::int,
    :created_since::timestamptz, :created_before::timestamptz,
    :available_since::timestamptz, :available_before::timestamptz,
    :after_id::bigint, :limit::bigint, :descending::bool, :budget::bigint,
    :payload::jsonb, :error::text, :idempotency_key::text
) WITH ORDINALITY AS p (page_id, resume_after, ord)
LEFT JOIN {schema}.jobs AS j ON j.id = p.page_id
ORDER BY p.ord;

-- name: _totals
-- Jobs per (kind, tenant, state) in this statement's snapshot: the folded totals plus
-- the deltas not yet folded (migration 0011), O(groups + unfolded deltas), never the
-- jobs table. backlog: the unfolded delta rows (a read rolls them up past a bound).
totals AS MATERIALIZED (
    SELECT t.kind, t.tenant_id, t.status, sum(t.n)::bigint AS n,
           sum(t.delta)::bigint AS delta_rows
    FROM (
        SELECT c.kind, c.tenant_id, c.status, c.n, 0 AS delta
        FROM {schema}.job_counts AS c
        UNION ALL
        SELECT d.kind, d.tenant_id, d.status, d.n, 1
        FROM {schema}.job_count_deltas AS d
    ) AS t
    GROUP BY t.kind, t.tenant_id, t.status
),
backlog AS MATERIALIZED (
    SELECT coalesce(sum(t.delta_rows), 0)::bigint AS backlog FROM totals AS t
)

-- name: counts
-- Jobs per (state, kind, tenant) from the totals; per pending group also how long its
-- oldest pending job has been due, on the database's clock (pending_probe: an index
-- probe per pending group; other groups pass a NULL bound and read nothing). Every row repeats the backlog; with no group, one
-- row of NULLs carries it.
WITH {_totals}
SELECT t.status, t.kind, t.tenant_id, t.n AS count,
       CASE WHEN t.status = 'pending'
            THEN greatest(extract(epoch FROM now() - p.first_at), 0)::float8
       END AS oldest_due_age,
       b.backlog
FROM backlog AS b
LEFT JOIN totals AS t ON t.n <> 0
LEFT JOIN LATERAL {schema}.pending_probe(
    t.kind, t.tenant_id, CASE WHEN t.status = 'pending' THEN 0 END
) AS p ON true;

-- name: roll_up_counts
-- Fold the unfolded deltas into the totals (NULL: another session is doing it), then,
-- holding the fold's lock, take this minute's queue samples unless taken (migration 0017).
SELECT r.folded,
    CASE WHEN r.folded IS NOT NULL THEN {schema}.sample_queues(
        :bound::int, :pickups::int, :keep::interval
    ) END AS sampled
FROM (SELECT {schema}.roll_up_job_counts(:key::bigint) AS folded OFFSET 0) AS r;

-- name: finished_counts
-- Throughput over time: the jobs that finished since :since, per bucket, kind and final
-- state (finished_kind_counts, migration 0017: the finished minutes, never the whole
-- table).
SELECT f.start, f.kind, f.status, f.count
FROM {schema}.finished_kind_counts(:since::timestamptz, :bucket::interval) AS f;

-- name: queue_samples
-- The queue samples taken since :since (migration 0017) folded per bucket and kind, as
-- skiplock.core._history.fold_samples: the backlog of the bucket's last sampled minute
-- (the last with a '' row; 0 for a kind it does not name), the claims summed, p50 their
-- weighted mean, p99 the largest. A range of the primary key, O(minutes x kinds).
WITH s AS MATERIALIZED (
    SELECT date_bin(:bucket::interval, q.minute, :since::timestamptz) AS start, q.minute,
        q.kind, q.pending, q.due, q.due_bounded, q.running, q.claims, q.claim_p50,
        q.claim_p99
    FROM {schema}.queue_samples AS q
    WHERE q.minute >= :since::timestamptz
),
latest AS (
    SELECT s.start, max(s.minute) AS minute FROM s WHERE s.kind = '' GROUP BY s.start
),
backlog AS (
    SELECT s.start, s.kind, s.pending, s.due, s.due_bounded, s.running
    FROM s JOIN latest AS l ON l.start = s.start AND l.minute = s.minute
),
claimed AS (
    SELECT s.start, s.kind, sum(s.claims)::integer AS claims,
        sum(s.claim_p50 * s.claims) / nullif(sum(s.claims), 0) AS claim_p50,
        max(s.claim_p99) AS claim_p99
    FROM s
    GROUP BY s.start, s.kind
)
SELECT c.start AS minute, c.kind, coalesce(b.pending, 0) AS pending,
    coalesce(b.due, 0) AS due, coalesce(b.due_bounded, false) AS due_bounded,
    coalesce(b.running, 0) AS running, c.claims, c.claim_p50, c.claim_p99
FROM claimed AS c
LEFT JOIN backlog AS b ON b.start = c.start AND b.kind = c.kind
ORDER BY c.start, c.kind;

-- name: health_queues
-- The jobs the health report looks at (R9), per kind and tenant: pending (from the
-- totals) with the earliest due time and the scheduled/due split counted up to :bound
-- + 1 (pending_probe), running and dead. Succeeded, failed and cancelled jobs are left
-- out. Every row repeats the backlog; with no group, one row of NULLs carries it.
WITH {_totals},
groups AS (
    SELECT t.kind, t.tenant_id,
        coalesce(sum(t.n) FILTER (WHERE t.status = 'pending'), 0)::bigint AS pending,
        coalesce(sum(t.n) FILTER (WHERE t.status = 'running'), 0)::bigint AS running,
        coalesce(sum(t.n) FILTER (WHERE t.status = 'dead'), 0)::bigint AS dead
    FROM totals AS t
    WHERE t.status IN ('pending', 'running', 'dead') AND t.n <> 0
    GROUP BY t.kind, t.tenant_id
)
SELECT g.kind, g.tenant_id, g.pending, p.scheduled AS scheduled_upto,
       p.due AS due_upto, p.first_due_at AS oldest_due_at, g.running, g.dead, b.backlog
FROM backlog AS b
LEFT JOIN groups AS g ON true
LEFT JOIN LATERAL {schema}.pending_probe(
    g.kind, g.tenant_id, CASE WHEN g.pending > 0 THEN :bound::int END
) AS p ON true
ORDER BY g.kind, g.tenant_id NULLS FIRST;

-- name: _worker_controls
-- The workers' columns of migration 0021: their slots, version and an operator's request.
w.slots, w.version, w.request, w.requested_by, w.requested_at

-- name: _worker_controls_before_0021
-- _worker_controls on a schema older than migration 0021 (its report names the
-- migrations to apply; _sql.versioned_query chooses by version): not there yet.
NULL::integer AS slots, NULL::text AS version, NULL::text AS request,
    NULL::text AS requested_by, NULL::timestamptz AS requested_at

-- name: health_workers
-- Every registered worker with the number of jobs running under its id and the oldest
-- claim among them (each read through jobs_running_worker_idx).
SELECT w.id, w.host, w.pid, w.kinds, w.tenants, w.started_at, w.heartbeat_at,
    r.running, r.oldest_claimed_at, {_worker_controls}
FROM {schema}.workers AS w
CROSS JOIN LATERAL (
    SELECT count(*) AS running, min(j.claimed_at) AS oldest_claimed_at
    FROM {schema}.jobs AS j
    WHERE j.status = 'running' AND j.claimed_by = w.id
) AS r
ORDER BY w.id;

-- name: health_orphans
-- Running jobs under a worker id without a row (its worker unregistered, or was
-- removed, with them still running), per id: read through jobs_running_worker_idx, so
-- it costs what the running jobs cost.
SELECT coalesce(j.claimed_by, '') AS worker_id, count(*) AS running,
    min(j.claimed_at) AS oldest_claimed_at
FROM {schema}.jobs AS j
WHERE j.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM {schema}.workers AS w WHERE w.id = j.claimed_by)
GROUP BY 1
ORDER BY 1;

-- name: replica
-- Whether this session reads a hot standby, and how far behind the primary it is: no lag
-- while it has replayed every change it received (an idle primary sends none), else the
-- time since the last change it replayed was committed. NULLs on a primary.
SELECT pg_is_in_recovery() AS standby,
    pg_last_xact_replay_timestamp() AS replayed_at,
    CASE
        WHEN NOT pg_is_in_recovery() THEN NULL
        WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN interval '0'
        ELSE greatest(now() - pg_last_xact_replay_timestamp(), interval '0')
    END AS lag;

-- name: _apply_update
-- Operator transition: :sources/:targets is the transition table's slice for the event
-- (computed by the core). Back to pending means due now with the claim cleared.
UPDATE {schema}.jobs AS j
SET status = t.target,
    started = false,
    recovered = false,
    available_at = CASE WHEN t.target = 'pending' THEN now() ELSE j.available_at END,
    claimed_by = CASE WHEN t.target = 'pending' THEN NULL ELSE j.claimed_by END,
    claimed_at = CASE WHEN t.target = 'pending' THEN NULL ELSE j.claimed_at END,
    completed_at = CASE WHEN t.target = 'pending' THEN NULL ELSE now() END,
    -- Only a replay resets attempts (core._lifecycle.after_operator).
    attempts = CASE
        WHEN :reset_attempts::bool AND t.target = 'pending' THEN 0 ELSE j.attempts
    END
FROM unnest(:sources::text[], :targets::text[]) AS t (source, target)
WHERE j.status = t.source AND {_job_filter}

-- name: _apply_events
-- The audit events of the jobs an operator transition changed ("changed": their id,
-- kind, tenant_id and the state left, source): :action is the event's action, the
-- details name the state left and add :details.
events AS (
    SELECT c.id AS job_id, c.kind, c.tenant_id, :action::text AS action,
        :actor::text AS actor, now() AS at,
        jsonb_build_object('from', c.source) || CAST(:details::text AS jsonb) AS details
    FROM changed AS c
)

-- name: apply
{_apply_update}
RETURNING j.id;

-- name: apply_audited
-- apply with an audit event per job changed (J10), in the same statement.
WITH changed AS (
    {_apply_update}
    RETURNING j.id, j.kind, j.tenant_id, t.source
),
{_apply_events},
{_audit_write}
SELECT e.job_id AS id, {_audit_columns} FROM events AS e;

-- name: apply_job
-- apply of one job (:ids holds its id), returning the job as get_job reads it: the
-- RETURNING list sees the row as the update left it.
{_apply_update}
RETURNING {_job_columns};

-- name: apply_job_audited
-- apply_job with its audit event (J10), in the same statement.
WITH changed AS (
    {_apply_update}
    RETURNING j.*, t.source
),
{_apply_events},
{_audit_write}
SELECT {_job_columns}, {_audit_columns}
FROM changed AS j JOIN events AS e ON e.job_id = j.id;

-- name: _delete
DELETE FROM {schema}.jobs AS j
WHERE j.status <> 'running' AND {_job_filter}

-- name: delete
{_delete}
RETURNING {_job_columns};

-- name: delete_audited
-- delete with an audit event per job deleted (J10), its payload in the details, in the
-- same statement.
WITH deleted AS (
    {_delete}
    RETURNING j.*
),
events AS (
    SELECT d.id AS job_id, d.kind, d.tenant_id, 'job_discard'::text AS action,
        :actor::text AS actor, now() AS at,
        jsonb_build_object('from', d.status, 'payload', d.payload) AS details
    FROM deleted AS d
),
{_audit_write}
SELECT {_job_columns}, {_audit_columns}
FROM deleted AS j JOIN events AS e ON e.job_id = j.id;

-- name: audit_trail
-- One job's audit events, oldest first: a job's next event is written after the
-- previous one committed, so its ids grow with time.
SELECT a.action AS audit_action, a.job_id AS audit_job_id, a.kind AS audit_kind,
    a.tenant_id AS audit_tenant, a.actor AS audit_actor, a.at AS audit_at,
    a.details::text AS audit_details
FROM {schema}.audit AS a
WHERE a.job_id = :id::bigint
ORDER BY a.id;

-- ---- workers and maintenance ---------------------------------------------------------

-- name: register_worker
-- Jobs still running under this id belong to an earlier life of the worker (it
-- registers only after dropping every job it held): back to pending, due as before,
-- attempts and claims unchanged. The count reads every released row before the worker
-- row is written, so this takes row locks in the order recovery does (jobs, then the
-- worker row).
WITH released AS (
    UPDATE {schema}.jobs AS j
    SET status = 'pending', claimed_by = NULL, claimed_at = NULL, recovered = true
    WHERE j.status = 'running' AND j.claimed_by = :id::text
    RETURNING j.id
)
INSERT INTO {schema}.workers AS w (id, host, pid, kinds, tenants, slots, version)
SELECT :id::text, :host::text, :pid::int, :kinds::text[], :tenants::text[], :slots::int,
    :version::text
FROM (SELECT count(*) FROM released) AS r
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, kinds = excluded.kinds,
    tenants = excluded.tenants, slots = excluded.slots, version = excluded.version,
    heartbeat_at = now();

-- name: heartbeat
-- No row when the worker row is gone (nothing refreshed); else one row with the ids
-- among :running that no longer run under this worker (missing ones included). Each
-- job is looked up by primary key (the status test as in _lease_fence). Jobs running
-- under the worker, not in :running and claimed before the heartbeat this one replaces
-- go back to pending as register_worker releases them (the worker lost them: issue 43),
-- only when :release asks (a one-time filter: otherwise the worker's running jobs are
-- not read at all). Released before the worker row is written: row locks in the order
-- recovery takes them.
WITH released AS (
    UPDATE {schema}.jobs AS j
    SET status = 'pending', claimed_by = NULL, claimed_at = NULL, recovered = true
    WHERE :release::boolean AND j.status = 'running' AND j.claimed_by = :id::text
      AND j.claimed_at < (
          SELECT p.heartbeat_at FROM {schema}.workers AS p WHERE p.id = :id::text
      )
      AND j.id <> ALL (:running::bigint[])
    RETURNING j.id
),
w AS (
    UPDATE {schema}.workers SET heartbeat_at = now()
    WHERE id = :id AND (SELECT count(*) FROM released) >= 0
    RETURNING id
)
SELECT coalesce(
    (
        SELECT array_agg(r.id ORDER BY r.id)
        FROM (SELECT DISTINCT unnest(:running::bigint[]) AS id) AS r
        WHERE NOT EXISTS (
            SELECT 1
            FROM {schema}.jobs AS j
            WHERE j.id = r.id
              AND j.status IS NOT DISTINCT FROM 'running'
              AND j.claimed_by = w.id
        )
    ),
    '{}'::bigint[]
) AS gone
FROM w;

-- name: unregister_worker
-- Jobs still running under the leaving worker's id (a processor that ignored the
-- shutdown, an outcome that could not be written) go back to pending as register_worker
-- releases them; their ids are returned. The delete's condition reads every released
-- row first, so this takes row locks in the order recovery does (jobs, then the worker).
WITH released AS (
    UPDATE {schema}.jobs AS j
    SET status = 'pending', claimed_by = NULL, claimed_at = NULL, recovered = true
    WHERE j.status = 'running' AND j.claimed_by = :id::text
    RETURNING j.id
),
gone AS (
    DELETE FROM {schema}.workers AS w
    WHERE w.id = :id::text AND (SELECT count(*) FROM released) >= 0
)
SELECT r.id FROM released AS r ORDER BY r.id;

-- name: try_lock
SELECT pg_try_advisory_xact_lock(:key::bigint) AS locked;

-- name: _stale
stale AS MATERIALIZED (
    SELECT j.id
    FROM {schema}.jobs AS j
    LEFT JOIN {schema}.workers AS w ON w.id = j.claimed_by
    LEFT JOIN unnest(:ttl_kinds::text[], :ttls_us::bigint[]) AS t (kind, ttl_us)
        ON t.kind = j.kind
    WHERE j.status = 'running'
      AND (w.id IS NULL OR w.heartbeat_at
          < now() - coalesce(t.ttl_us, :default_ttl_us::bigint) * interval '1 microsecond')
    FOR UPDATE OF j SKIP LOCKED
)

-- name: _recover_update
UPDATE {schema}.jobs AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
    claimed_by = CASE WHEN j.attempts >= j.max_attempts THEN j.claimed_by END,
    claimed_at = CASE WHEN j.attempts >= j.max_attempts THEN j.claimed_at END,
    completed_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    last_error = left(:mark::text || coalesce(' ' || j.last_error, ''), :max_error::int),
    recovered = true,
    -- X5: a run under way (its start counted an attempt) failed with its worker.
    errors = CASE
        WHEN j.started THEN {schema}.recorded_errors(
            errors => j.errors,
            keep => {max_recorded_errors},
            attempt => j.attempts,
            worker_id => j.claimed_by,
            claimed_at => j.claimed_at,
            failed_at => now(),
            error => :mark::text
        )
        ELSE j.errors
    END
FROM stale
WHERE j.id = stale.id

-- name: recover_stale
-- Running jobs whose worker stopped heart-beating (or whose worker row is gone): back to
-- pending with attempts unchanged, or dead when no attempt is left. The mark is
-- prepended to the previous error.
WITH {_stale}
{_recover_update}
RETURNING j.id;

-- name: recover_stale_audited
-- recover_stale with an audit event per job moved to dead (J10), in the same statement;
-- returns to pending are not audited.
WITH {_stale},
recovered AS (
    {_recover_update}
    RETURNING j.id, j.kind, j.tenant_id, j.status, j.last_error, j.attempts
),
events AS (
    SELECT r.id AS job_id, r.kind, r.tenant_id,
        CASE WHEN r.status = 'dead' THEN 'job_dlq' END AS action,
        :actor::text AS actor, now() AS at,
        CASE WHEN r.status = 'dead' THEN
            jsonb_build_object('error', r.last_error, 'attempts', r.attempts)
        END AS details
    FROM recovered AS r
),
{_audit_write}
SELECT e.job_id AS id, {_audit_columns} FROM events AS e;

-- name: delete_silent_workers
-- After a recovery in the same transaction: rows of workers silent for longer than
-- every TTL (their jobs were just recovered). A heartbeat that commits meanwhile keeps
-- its row (the delete re-checks the row it waited for).
DELETE FROM {schema}.workers AS w
WHERE w.heartbeat_at < now() - :longest_us::bigint * interval '1 microsecond';

-- name: try_maintenance
-- Take a maintenance run: the row lock makes one of concurrent callers win per period
-- (a loser waits for the winner's row and re-checks it). :always grants a period <= 0
-- even to a caller whose now() is older than the last run.
INSERT INTO {schema}.maintenance AS m (name, last_run_at)
VALUES (:name::text, now())
ON CONFLICT (name) DO UPDATE
SET last_run_at = now()
WHERE :always::bool OR m.last_run_at <= now() - :every_us::bigint * interval '1 microsecond'
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
-- One retention batch: delete (and optionally archive) the oldest succeeded jobs. The
-- locking walk is purge_candidates (migration 0007): its plan is the ordered walk of
-- jobs_succeeded_completed_idx whatever the statistics say. With :remember_keys their
-- idempotency keys stay in idempotency_keys (Settings.idempotency_retention).
WITH doomed AS MATERIALIZED (
    SELECT c.id
    FROM {schema}.purge_candidates(
        older_than => :older_than_us::bigint * interval '1 microsecond', batch => :batch_size::int
    ) AS c (id)
),
deleted AS (
    DELETE FROM {schema}.jobs AS j
    USING doomed
    WHERE j.id = doomed.id
    RETURNING j.*
),
remembered AS (
    INSERT INTO {schema}.idempotency_keys AS r (idempotency_key, idempotency_scope, job_id)
    SELECT
        coalesce(d.idempotency_key, d.tenant_idempotency_key),
        CASE WHEN d.tenant_idempotency_key IS NOT NULL THEN d.tenant_id END, d.id
    FROM deleted AS d
    WHERE :remember_keys::bool
        AND (d.idempotency_key IS NOT NULL OR d.tenant_idempotency_key IS NOT NULL)
    ON CONFLICT ON CONSTRAINT idempotency_keys_key DO UPDATE
    SET job_id = EXCLUDED.job_id, purged_at = now()
),
archived AS (
    INSERT INTO {schema}.jobs_archive (
        id, kind, tenant_id, payload, status, priority, available_at, created_at,
        claimed_at, claimed_by, attempts, max_attempts, last_error, completed_at,
        idempotency_key, trace_context, claims, explicit_max_attempts, started, recovered,
        started_at, result, errors, tenant_idempotency_key, concurrency_key,
        concurrency_limit
    )
    SELECT
        d.id, d.kind, d.tenant_id, d.payload, d.status, d.priority, d.available_at,
        d.created_at, d.claimed_at, d.claimed_by, d.attempts, d.max_attempts, d.last_error,
        d.completed_at, d.idempotency_key, d.trace_context, d.claims, d.explicit_max_attempts,
        d.started, d.recovered, d.started_at, d.result, d.errors, d.tenant_idempotency_key,
        d.concurrency_key, d.concurrency_limit
    FROM deleted AS d
    WHERE :archive::bool
    -- An id archived before (the job was restored from the archive with its id and
    -- finished again): the archive keeps one copy, the latest.
    ON CONFLICT (id) DO UPDATE SET
        kind = EXCLUDED.kind, tenant_id = EXCLUDED.tenant_id, payload = EXCLUDED.payload,
        status = EXCLUDED.status, priority = EXCLUDED.priority,
        available_at = EXCLUDED.available_at, created_at = EXCLUDED.created_at,
        claimed_at = EXCLUDED.claimed_at, claimed_by = EXCLUDED.claimed_by,
        attempts = EXCLUDED.attempts, max_attempts = EXCLUDED.max_attempts,
        last_error = EXCLUDED.last_error, completed_at = EXCLUDED.completed_at,
        idempotency_key = EXCLUDED.idempotency_key, trace_context = EXCLUDED.trace_context,
        archived_at = now(), claims = EXCLUDED.claims,
        explicit_max_attempts = EXCLUDED.explicit_max_attempts, started = EXCLUDED.started,
        recovered = EXCLUDED.recovered, started_at = EXCLUDED.started_at,
        result = EXCLUDED.result, errors = EXCLUDED.errors,
        tenant_idempotency_key = EXCLUDED.tenant_idempotency_key,
        concurrency_key = EXCLUDED.concurrency_key,
        concurrency_limit = EXCLUDED.concurrency_limit
)
SELECT count(*)::int AS purged FROM deleted;

-- name: forget_idempotency_keys
-- Retention of the remembered keys: up to :batch_size of those purged before
-- now() - :window_us (NULL: every one; keys are not remembered then), oldest first.
WITH doomed AS MATERIALIZED (
    SELECT r.ctid AS row_id
    FROM {schema}.idempotency_keys AS r
    WHERE :window_us::bigint IS NULL
        OR r.purged_at < now() - :window_us::bigint * interval '1 microsecond'
    ORDER BY r.purged_at
    LIMIT :batch_size::int
)
DELETE FROM {schema}.idempotency_keys AS r
USING doomed
WHERE r.ctid = doomed.row_id;

-- name: purge_audit
-- One retention batch of the audit trail: delete the oldest events (J10). The walk is
-- purge_audit_candidates (migration 0008): the ordered walk of audit_at_idx whatever the
-- statistics say.
WITH doomed AS MATERIALIZED (
    SELECT c.id
    FROM {schema}.purge_audit_candidates(
        older_than => :older_than_us::bigint * interval '1 microsecond', batch => :batch_size::int
    ) AS c (id)
),
deleted AS (
    DELETE FROM {schema}.audit AS a
    USING doomed
    WHERE a.id = doomed.id
    RETURNING a.id
)
SELECT count(*)::int AS purged FROM deleted;

-- ---- run-time controls (migration 0014) -----------------------------------------------

-- name: controls
-- Every pause and limit, in one read (workers refresh it every controls_refresh): a row
-- per pause (what = 'pause'), per rate limit ('limit') and per concurrency limit
-- ('concurrency', 0020: the key in tenant_id, the scope in provider, the limit in burst)
-- and per worker asked to drain or stop ('request', 0021: its id in tenant_id, the action
-- in provider), each kind of row in a stable order.
SELECT 'pause' AS what, p.kind, p.tenant_id, NULL::text AS provider, p.reason,
    NULL::float8 AS rps, NULL::int AS burst, p.actor, p.since AS at
FROM {schema}.pauses AS p
UNION ALL
SELECT 'limit', l.kind, l.tenant_id, l.provider, NULL, l.rps, l.burst, l.actor, l.updated_at
FROM {schema}.limits AS l
UNION ALL
SELECT 'concurrency', c.kind, c.concurrency_key, c.scope, NULL, NULL, c.max_running,
    c.actor, c.updated_at
FROM {schema}.concurrency_limits AS c
UNION ALL
SELECT 'request', NULL, w.id, w.request, NULL, NULL, NULL, w.requested_by, w.requested_at
FROM {schema}.workers AS w
WHERE w.request IS NOT NULL
ORDER BY 1 DESC, 4 NULLS FIRST, 2 NULLS FIRST, 3 NULLS FIRST;

-- name: _control_audit
-- The audit event of a control change (J10; no job), written in the change's statement
-- unless :audit_table is false (then the store hands the returned row to the sink).
audited AS (
    INSERT INTO {schema}.audit (at, job_id, kind, tenant_id, action, actor, details)
    SELECT c.at, NULL, c.kind, c.tenant_id, :action::text, :actor::text, c.details
    FROM changed AS c
    WHERE :audit_table::bool
)

-- name: pause
-- Pause (kind, tenant) (NULL: any); pausing again keeps the first time and takes the new
-- reason and actor.
WITH changed AS (
    INSERT INTO {schema}.pauses AS p (kind, tenant_id, reason, actor)
    VALUES (:kind::text, :tenant::text, :reason::text, :actor::text)
    ON CONFLICT ((coalesce(kind, '')), (coalesce(tenant_id, ''))) DO UPDATE
    SET reason = EXCLUDED.reason, actor = EXCLUDED.actor
    RETURNING p.kind, p.tenant_id, p.reason, p.actor, p.since, now() AS at,
        jsonb_build_object('reason', p.reason) AS details
),
{_control_audit}
SELECT c.kind, c.tenant_id, c.reason, c.actor, c.since, c.at, c.details::text AS details
FROM changed AS c;

-- name: resume
-- Lift the pause of exactly (kind, tenant) (NULL: any); no row: there was none.
WITH changed AS (
    DELETE FROM {schema}.pauses AS p
    WHERE p.kind IS NOT DISTINCT FROM :kind::text
      AND p.tenant_id IS NOT DISTINCT FROM :tenant::text
    RETURNING p.kind, p.tenant_id, p.reason, p.actor, p.since, now() AS at,
        jsonb_build_object('reason', p.reason) AS details
),
{_control_audit}
SELECT c.kind, c.tenant_id, c.reason, c.actor, c.since, c.at, c.details::text AS details
FROM changed AS c;

-- name: set_limit
-- Set the limit of (kind, tenant) or of a provider, replacing the one there was.
WITH changed AS (
    INSERT INTO {schema}.limits AS l (kind, tenant_id, provider, rps, burst, actor)
    VALUES (:kind::text, :tenant::text, :provider::text, :rps::float8, :burst::int,
        :actor::text)
    ON CONFLICT ((coalesce(kind, '')), (coalesce(tenant_id, '')), (coalesce(provider, '')))
    DO UPDATE SET rps = EXCLUDED.rps, burst = EXCLUDED.burst, actor = EXCLUDED.actor,
        updated_at = now()
    RETURNING l.kind, l.tenant_id, l.provider, l.rps, l.burst, l.actor, l.updated_at,
        now() AS at,
        jsonb_build_object('provider', l.provider, 'rps', l.rps, 'burst', l.burst) AS details
),
{_control_audit}
SELECT c.kind, c.tenant_id, c.provider, c.rps, c.burst, c.actor, c.updated_at, c.at,
    c.details::text AS details
FROM changed AS c;

-- name: clear_limit
-- Remove the limit of exactly (kind, tenant) or of a provider; no row: there was none.
WITH changed AS (
    DELETE FROM {schema}.limits AS l
    WHERE l.kind IS NOT DISTINCT FROM :kind::text
      AND l.tenant_id IS NOT DISTINCT FROM :tenant::text
      AND l.provider IS NOT DISTINCT FROM :provider::text
    RETURNING l.kind, l.tenant_id, l.provider, l.rps, l.burst, l.actor, l.updated_at,
        now() AS at,
        jsonb_build_object('provider', l.provider, 'rps', l.rps, 'burst', l.burst) AS details
),
-- The buckets counted under the cleared limit go with it (issue 45; the rule of
-- skiplock.core.store.outlived_buckets): they restart full, as after any change of limit,
-- and no reader takes a used-up bucket of a limit no longer in force for a live one. A
-- provider's bucket; a pair's; a kind default's pairs without a limit of their own. Only
-- buckets of the cleared rate and burst: one a rate of the workers' code counts stays.
dropped AS (
    DELETE FROM {schema}.rate_buckets AS b
    USING changed AS c
    WHERE b.rps = c.rps AND b.burst = c.burst
      AND CASE
          WHEN c.provider IS NOT NULL THEN b.scope = 'provider' AND b.name = c.provider
          WHEN c.tenant_id IS NOT NULL THEN
              b.scope = 'pair' AND b.name = c.kind AND b.tenant_id = c.tenant_id
          ELSE b.scope = 'pair' AND b.name = c.kind AND NOT EXISTS (
              SELECT 1 FROM {schema}.limits AS o
              WHERE o.kind = c.kind AND o.tenant_id = b.tenant_id AND o.provider IS NULL)
      END
),
{_control_audit}
SELECT c.kind, c.tenant_id, c.provider, c.rps, c.burst, c.actor, c.updated_at, c.at,
    c.details::text AS details
FROM changed AS c;

-- name: set_concurrency
-- Set the concurrency limit of a kind (node or cluster scope) or of a key (0020),
-- replacing the one there was.
WITH changed AS (
    INSERT INTO {schema}.concurrency_limits AS c
        (kind, concurrency_key, scope, max_running, actor)
    VALUES (:kind::text, :key::text, :scope::text, :limit::int, :actor::text)
    ON CONFLICT ((coalesce(kind, '')), (coalesce(concurrency_key, '')), scope)
    DO UPDATE SET max_running = EXCLUDED.max_running, actor = EXCLUDED.actor,
        updated_at = now()
    RETURNING c.kind, c.concurrency_key, c.scope, c.max_running, c.actor, c.updated_at,
        now() AS at, NULL::text AS tenant_id,
        jsonb_build_object('key', c.concurrency_key, 'scope', c.scope, 'limit', c.max_running)
            AS details
),
{_control_audit}
SELECT c.kind, c.concurrency_key, c.scope, c.max_running, c.actor, c.updated_at, c.at,
    c.details::text AS details
FROM changed AS c;

-- name: clear_concurrency
-- Remove the concurrency limit of exactly (kind, key, scope); no row: there was none.
WITH changed AS (
    DELETE FROM {schema}.concurrency_limits AS c
    WHERE c.kind IS NOT DISTINCT FROM :kind::text
      AND c.concurrency_key IS NOT DISTINCT FROM :key::text
      AND c.scope = :scope::text
    RETURNING c.kind, c.concurrency_key, c.scope, c.max_running, c.actor, c.updated_at,
        now() AS at, NULL::text AS tenant_id,
        jsonb_build_object('key', c.concurrency_key, 'scope', c.scope, 'limit', c.max_running)
            AS details
),
{_control_audit}
SELECT c.kind, c.concurrency_key, c.scope, c.max_running, c.actor, c.updated_at, c.at,
    c.details::text AS details
FROM changed AS c;

-- name: request_worker
-- Ask a registered worker to drain or stop (0021); no row: no such worker.
WITH changed AS (
    UPDATE {schema}.workers AS w
    SET request = :mode::text, requested_by = :actor::text, requested_at = now()
    WHERE w.id = :id::text
    RETURNING w.id, w.request, w.requested_by, w.requested_at, now() AS at,
        NULL::text AS kind, NULL::text AS tenant_id,
        jsonb_build_object('worker_id', w.id) AS details
),
{_control_audit}
SELECT c.id, c.request, c.requested_by, c.requested_at, c.at, c.details::text AS details
FROM changed AS c;

-- ---- the retention view (migration 0019) ----------------------------------------------

-- name: retention
-- What each retention purge removes next (issue 45, point 7), one row. Succeeded jobs
-- completed before :jobs_us ago, exactly and without walking them: the finished minutes
-- before the cutoff's minute (folded, plus the deltas not yet folded), then the jobs of
-- that one minute through jobs_succeeded_completed_idx. Audit events recorded before
-- :audit_us ago: counted through audit_at_idx up to :bound + 1, past that estimated from
-- the table's row estimate and its first and last event (audit_estimated). A NULL window
-- is a purge that is off: NULL.
WITH c AS MATERIALIZED (
    SELECT now() AS now,
        now() - :jobs_us::bigint * interval '1 microsecond' AS jobs_before,
        date_bin('1 minute', now() - :jobs_us::bigint * interval '1 microsecond',
                 timestamptz '2000-01-01 00:00:00+00') AS jobs_minute,
        now() - :audit_us::bigint * interval '1 microsecond' AS audit_before
),
a AS MATERIALIZED (
    SELECT (SELECT count(*) FROM (
        SELECT 1 FROM {schema}.audit AS e WHERE e.at < c.audit_before LIMIT :bound::int + 1
    ) AS s) AS counted
    FROM c
)
SELECT c.now,
    CASE WHEN c.jobs_before IS NOT NULL THEN (
        (SELECT coalesce(sum(m.n), 0) FROM {schema}.job_finished_minutes AS m
         WHERE m.status = 'succeeded' AND m.minute < c.jobs_minute)
        + (SELECT coalesce(sum(d.n), 0) FROM {schema}.job_count_deltas AS d
           WHERE d.status = 'succeeded' AND d.minute < c.jobs_minute)
        + (SELECT count(*) FROM {schema}.jobs AS j
           WHERE j.status = 'succeeded' AND j.completed_at >= c.jobs_minute
             AND j.completed_at < c.jobs_before)
    )::bigint END AS jobs_due,
    CASE
        WHEN c.audit_before IS NULL THEN NULL
        WHEN a.counted <= :bound::int THEN a.counted
        ELSE greatest(a.counted, (
            SELECT least(r.tuples, round(r.tuples * extract(epoch FROM c.audit_before - lo.at)
                / nullif(extract(epoch FROM hi.at - lo.at), 0)))
            FROM (SELECT greatest(cl.reltuples, 0)::float8 AS tuples FROM pg_class AS cl
                  WHERE cl.oid = to_regclass(:audit_table::text)) AS r,
                (SELECT min(e.at) AS at FROM {schema}.audit AS e) AS lo,
                (SELECT max(e.at) AS at FROM {schema}.audit AS e) AS hi
        ))
    END::bigint AS audit_due,
    c.audit_before IS NOT NULL AND a.counted > :bound::int AS audit_estimated
FROM c, a;

-- name: purge_runs
-- The last run of each retention purge (migration 0019).
SELECT r.name, r.finished_at, r.seconds, r.removed FROM {schema}.purge_runs AS r;

-- name: record_purge
-- A retention purge finished: replace its last run.
INSERT INTO {schema}.purge_runs AS r (name, finished_at, seconds, removed)
VALUES (:name::text, now(), :seconds::float8, :removed::bigint)
ON CONFLICT (name) DO UPDATE
SET finished_at = EXCLUDED.finished_at, seconds = EXCLUDED.seconds, removed = EXCLUDED.removed;
