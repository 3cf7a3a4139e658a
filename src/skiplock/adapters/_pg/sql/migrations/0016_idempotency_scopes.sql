-- 0016: idempotency keys per tenant, and remembered after retention (R16, issue 30).
-- A job's key is unique in its scope: idempotency_scope is NULL for the global scope
-- (every key written before, and plain SQL inserts that leave it out) or the job's
-- tenant for a key unique among that tenant's jobs. A key whose job retention purged is
-- kept in idempotency_keys for Settings.idempotency_retention, so an enqueue with it
-- still finds it (docs/tasks.md, "Idempotency keys").
-- Placeholders: {schema} (quoted schema name).

ALTER TABLE {schema}.jobs ADD COLUMN idempotency_scope text;
ALTER TABLE {schema}.jobs_archive ADD COLUMN idempotency_scope text;

-- The key index becomes (key, scope), NULL scopes equal: global keys stay unique among
-- themselves. Enqueue's ON CONFLICT (idempotency_key, idempotency_scope) infers it.
DROP INDEX {schema}.jobs_idempotency_key_idx;
CREATE UNIQUE INDEX jobs_idempotency_key_idx
    ON {schema}.jobs (idempotency_key, idempotency_scope) NULLS NOT DISTINCT
    WHERE idempotency_key IS NOT NULL;

-- Keys of purged jobs: written by retention's purge with the job's id, read by a keyed
-- enqueue (one index probe per key), deleted by retention once older than the window.
CREATE TABLE {schema}.idempotency_keys (
    idempotency_key text NOT NULL,
    idempotency_scope text,
    job_id bigint NOT NULL,
    purged_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_key UNIQUE NULLS NOT DISTINCT (idempotency_key, idempotency_scope)
);
CREATE INDEX idempotency_keys_purged_at_idx ON {schema}.idempotency_keys (purged_at);
