-- 0016: cluster-wide rates (docs/controls.md, "Cluster-wide rates and throttling").
-- The token buckets every worker draws from: one per (kind, tenant) pair with a rate and
-- one per provider with a cap. A claim of rate-limited kinds reads them under the kinds'
-- advisory locks, takes no more jobs than they hold, and writes them back in the same
-- transaction. A bucket that has no row, or whose row refilled to its burst, is full.
-- Times are the database's clock. Placeholders: {schema} (quoted schema name).

CREATE TABLE {schema}.rate_buckets (
    -- 'pair': name is a kind, tenant_id its tenant ('' for none: a tenant is never
    -- empty); 'provider': name is a provider, tenant_id ''.
    scope text NOT NULL,
    name text NOT NULL,
    tenant_id text NOT NULL DEFAULT '',
    tokens float8 NOT NULL,
    updated_at timestamptz NOT NULL,
    -- The limit the tokens were counted with (a changed limit starts a full bucket).
    rps float8 NOT NULL,
    burst integer NOT NULL,
    PRIMARY KEY (scope, name, tenant_id)
);
