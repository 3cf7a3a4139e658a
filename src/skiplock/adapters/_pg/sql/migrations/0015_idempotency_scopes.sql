-- 0015: idempotency keys per tenant, and remembered after retention (R16, issue 30).
-- A global key (the default, and every key written before) stays in idempotency_key
-- with its unique index unchanged, so inserts with ON CONFLICT (idempotency_key) WHERE
-- idempotency_key IS NOT NULL (older releases during a rolling upgrade, plain SQL) keep
-- working. A key unique among one tenant's jobs is kept in tenant_idempotency_key
-- instead, unique per tenant. A key whose job retention purged is kept in
-- idempotency_keys for Settings.idempotency_retention, so an enqueue with it still finds
-- it (docs/keys.md, "Idempotency keys").
-- Placeholders: {schema} (quoted schema name).

ALTER TABLE {schema}.jobs ADD COLUMN tenant_idempotency_key text;
ALTER TABLE {schema}.jobs_archive ADD COLUMN tenant_idempotency_key text;

CREATE UNIQUE INDEX jobs_tenant_idempotency_key_idx
    ON {schema}.jobs (tenant_idempotency_key, tenant_id)
    WHERE tenant_idempotency_key IS NOT NULL;

-- Keys of purged jobs, with their scope (NULL: global, else the tenant): written by
-- retention's purge with the job's id, read by a keyed enqueue (one index probe per
-- key), deleted by retention once older than the window.
CREATE TABLE {schema}.idempotency_keys (
    idempotency_key text NOT NULL,
    idempotency_scope text,
    job_id bigint NOT NULL,
    purged_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_key UNIQUE NULLS NOT DISTINCT (idempotency_key, idempotency_scope)
);
CREATE INDEX idempotency_keys_purged_at_idx ON {schema}.idempotency_keys (purged_at);
