"""The application's own tables, in the schema ``aa`` (skiplock keeps its jobs in ``skiplock``).

``setup(dsn)`` creates both: skiplock's through its public ``apply_schema``, the
application's with the DDL below. Both steps are idempotent.
"""

from __future__ import annotations

import psycopg

from skiplock.adapters.psycopg import apply_schema

DDL = """
CREATE SCHEMA IF NOT EXISTS aa;

-- AA_TENANT: metadata.rate_limit.<job_kind> = {rps, burst}, the default set at onboarding.
CREATE TABLE IF NOT EXISTS aa.tenant (
    id text PRIMARY KEY,
    name text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE IF NOT EXISTS aa.app_user (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL REFERENCES aa.tenant,
    email text NOT NULL,
    UNIQUE (tenant, email)
);

CREATE TABLE IF NOT EXISTS aa.suppression (
    tenant text NOT NULL,
    email text NOT NULL,
    PRIMARY KEY (tenant, email)
);

-- AA_EMAIL_LOG: one row per e-mail; provider_message_id is the dedup key.
CREATE TABLE IF NOT EXISTS aa.email_log (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    reference text NOT NULL UNIQUE,
    recipient text NOT NULL,
    template text NOT NULL,
    status text NOT NULL CHECK (status IN ('sent', 'suppressed')),
    provider_message_id text UNIQUE,
    job_id bigint NOT NULL,
    logged_at timestamptz NOT NULL DEFAULT now()
);

-- The platform's own audit of per-delivery actions (email_sent); skiplock audits the jobs.
CREATE TABLE IF NOT EXISTS aa.audit_log (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    tenant text,
    action text NOT NULL,
    actor text,
    details jsonb
);

-- AA_OUTBOX_EVENT: events for external consumers (webhooks).
CREATE TABLE IF NOT EXISTS aa.outbox_event (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    topic text NOT NULL,
    body jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dispatched')),
    created_at timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_event_pending
    ON aa.outbox_event (tenant, id) WHERE status = 'pending';

-- DDM_ENTITY and its types; index_status follows index_sync / gin_backfill (OP-17).
CREATE TABLE IF NOT EXISTS aa.entity_type (
    type_key text PRIMARY KEY,
    is_external_source_target boolean NOT NULL DEFAULT false,
    gin_status text NOT NULL DEFAULT 'none'
        CHECK (gin_status IN ('none', 'building', 'active', 'failed'))
);

CREATE TABLE IF NOT EXISTS aa.entity_type_attribute (
    type_key text NOT NULL REFERENCES aa.entity_type,
    attribute text NOT NULL,
    searchable boolean NOT NULL DEFAULT false,
    data_type text NOT NULL DEFAULT 'text' CHECK (data_type IN ('text', 'numeric')),
    index_status text NOT NULL DEFAULT 'none'
        CHECK (index_status IN ('none', 'building', 'active', 'failed')),
    PRIMARY KEY (type_key, attribute)
);

CREATE TABLE IF NOT EXISTS aa.entity (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    type_key text NOT NULL REFERENCES aa.entity_type,
    key text NOT NULL,
    attributes jsonb NOT NULL DEFAULT '{}',
    search_vector tsvector,
    UNIQUE (tenant, type_key, key)
);

-- OP-41: an uploaded import, its staged rows, and its progress.
CREATE TABLE IF NOT EXISTS aa.import_job (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    type_key text NOT NULL REFERENCES aa.entity_type,
    status text NOT NULL DEFAULT 'staged' CHECK (status IN ('staged', 'running', 'done')),
    total integer NOT NULL,
    committed integer NOT NULL DEFAULT 0,
    invalid integer NOT NULL DEFAULT 0,
    job_id bigint
);

CREATE TABLE IF NOT EXISTS aa.import_row (
    import_id bigint NOT NULL REFERENCES aa.import_job ON DELETE CASCADE,
    row_no integer NOT NULL,
    data jsonb NOT NULL,
    status text NOT NULL DEFAULT 'staged' CHECK (status IN ('staged', 'committed', 'invalid')),
    error text,
    PRIMARY KEY (import_id, row_no)
);

-- DDM_ATTACHMENT: virus_scan patches virus_scan_status.
CREATE TABLE IF NOT EXISTS aa.attachment (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    name text NOT NULL,
    content bytea NOT NULL,
    virus_scan_status text NOT NULL DEFAULT 'pending'
        CHECK (virus_scan_status IN ('pending', 'clean', 'infected')),
    scanned_at timestamptz
);
"""


def setup(dsn: str) -> None:
    """Create skiplock's schema and the application's tables (both idempotent)."""
    apply_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
