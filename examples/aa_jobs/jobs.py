"""The job kinds of the AA_JOB spec, their policies and their processors.

Each kind is declared once (``skiplock.declare``): the web process enqueues through the
declarations, the worker binds its processors to the same ones, so both resolve one
policy. ``build(dsn)`` makes the engine with every processor and the 5-minute
``cleanup_jobs`` schedule.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, LiteralString

import attrs
from prometheus_client import CollectorRegistry
from psycopg.types.json import Jsonb

import skiplock
from skiplock import AsyncEngine, JobContext, RateLimit, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.contrib.prometheus import PrometheusMetrics

from .fakes import FakeEmailProvider, FakeScanner, FakeWebhookConsumer
from .indexes import register_indexes

if TYPE_CHECKING:
    from psycopg import AsyncConnection

# The provider cap: one account limit shared by every tenant's e-mails (platform
# configuration, not data). 14/s is a common sandbox limit of real providers.
PROVIDER = "email_provider"
PROVIDER_CAP = RateLimit(rps=14, burst=14)

# The per-(tenant, kind) token buckets every tenant starts with (J6). Onboarding writes them
# into the tenant's metadata.rate_limit; today the engine applies these per-kind values to
# each tenant's own bucket; controls.apply_tenant_limits stores per-tenant changes.
TENANT_DEFAULTS: dict[str, RateLimit] = {
    "email_send": RateLimit(rps=5, burst=10),
    "outbox_dispatch": RateLimit(rps=20, burst=40),
}


@attrs.frozen
class Email:
    to: str
    template: str
    reference: str  # our id for the e-mail: the provider deduplicates by it


@attrs.frozen
class Outbox:
    batch: int = 100  # most events one job dispatches


@attrs.frozen
class Import:
    import_id: int


@attrs.frozen
class Scan:
    attachment_id: int


# Provider calls are expensive: longer backoff, a short stale TTL (e-mails are quick).
email_send = skiplock.declare(
    "email_send",
    Email,
    transactional=True,  # email_log and email_sent commit with the job's completion
    provider=PROVIDER,
    rate_limit=TENANT_DEFAULTS["email_send"],
    max_attempts=5,
    backoff_base=timedelta(minutes=1),
    stale_ttl=timedelta(minutes=2),
    timeout=30,
)
outbox_dispatch = skiplock.declare(
    "outbox_dispatch",
    Outbox,
    transactional=True,  # events are marked dispatched with the job's completion
    rate_limit=TENANT_DEFAULTS["outbox_dispatch"],
    max_attempts=8,
    backoff_base=10,
    timeout=60,
)
bulk_import = skiplock.declare(
    "bulk_import",
    Import,
    autocommit=True,  # one transaction per batch, not one for the whole upload
    max_attempts=3,
    stale_ttl=timedelta(hours=2),
)
virus_scan = skiplock.declare(
    "virus_scan", Scan, transactional=True, max_attempts=3, timeout=120, backoff_base=15
)
cleanup_jobs = skiplock.declare("cleanup_jobs", transactional=True, max_attempts=1)

DEFAULTS: dict[str, Any] = {
    "concurrency": 4,  # J1: the pool size per service instance
    "audit": True,  # J10: job_enqueued ... job_discard, with the actor
    "audit_actor": "aa-service",  # the service account of the platform's own enqueues
    "caps": {PROVIDER: PROVIDER_CAP},
}


def make_settings(**changes: Any) -> Settings:
    """The application's settings, with ``changes`` on top (tests make retries fast)."""
    return Settings(**{**DEFAULTS, **changes})


@attrs.define
class Services:
    """The outside world the processors talk to, and their tunables."""

    provider: FakeEmailProvider = attrs.Factory(FakeEmailProvider)
    webhooks: FakeWebhookConsumer = attrs.Factory(FakeWebhookConsumer)
    scanner: FakeScanner = attrs.Factory(FakeScanner)
    import_batch: int = 500
    outbox_keep: timedelta = timedelta(days=7)


@attrs.define
class AaJobs:
    """The engine with every processor, the services it uses and its metrics."""

    engine: AsyncEngine
    store: AsyncPsycopgJobStore  # the app opens it first and closes it last
    services: Services
    metrics: PrometheusMetrics


def build(dsn: str, settings: Settings | None = None, services: Services | None = None) -> AaJobs:
    """The engine on ``dsn`` with every kind's processor and the cleanup schedule."""
    # Metrics in the spec's namespace: mdm_jobs_pending{tenant,kind}, ... (J11).
    metrics = PrometheusMetrics(namespace="mdm", registry=CollectorRegistry())
    store = AsyncPsycopgJobStore(dsn)
    engine = AsyncEngine(store, settings or make_settings(), metrics=metrics)
    services = services or Services()
    _register(engine, services)
    register_indexes(engine)
    engine.periodic("cleanup_jobs", every=timedelta(minutes=5), payload={})
    return AaJobs(engine, store, services, metrics)


def _register(engine: AsyncEngine, svc: Services) -> None:
    @engine.task(email_send)
    async def send_email(email: Email, ctx: JobContext) -> dict[str, Any]:
        conn: AsyncConnection[Any] = ctx.connection
        # A re-run whose earlier attempt committed (a replay, a recovered claim): done.
        logged = await _one(
            conn, "SELECT status FROM aa.email_log WHERE reference = %s", [email.reference]
        )
        if logged is not None:
            return {"status": logged[0], "again": True}
        suppressed = await _one(
            conn,
            "SELECT 1 FROM aa.suppression WHERE tenant = %s AND email = %s",
            [ctx.tenant, email.to],
        )
        message_id = None
        if suppressed is None:
            # The provider answers a reference it has seen with the first message id and
            # sends nothing: a re-run after a lost commit sends no second e-mail.
            message_id = await svc.provider.send(
                email.to, email.template, reference=email.reference
            )
        status = "sent" if message_id else "suppressed"
        inserted = await _one(
            conn,
            "INSERT INTO aa.email_log (tenant, reference, recipient, template, status,"
            " provider_message_id, job_id) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (provider_message_id) DO NOTHING RETURNING id",
            [ctx.tenant, email.reference, email.to, email.template, status, message_id, ctx.job_id],
        )
        if inserted is not None and message_id:
            await conn.execute(
                "INSERT INTO aa.audit_log (tenant, action, actor, details)"
                " VALUES (%s, 'email_sent', %s, jsonb_build_object('job_id', %s::bigint,"
                " 'provider_message_id', %s::text))",
                [ctx.tenant, ctx.worker_id, ctx.job_id, message_id],
            )
        return {"status": status, "provider_message_id": message_id}

    @engine.task(outbox_dispatch)
    async def dispatch(outbox: Outbox, ctx: JobContext) -> dict[str, int]:
        conn: AsyncConnection[Any] = ctx.connection
        # SKIP LOCKED: two dispatchers of one tenant share its events, never doubly.
        cur = await conn.execute(
            "SELECT id, topic, body FROM aa.outbox_event WHERE tenant = %s"
            " AND status = 'pending' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            [ctx.tenant, outbox.batch],
        )
        events = await cur.fetchall()
        for event_id, topic, body in events:
            await svc.webhooks.deliver(event_id, topic, body)  # raises: all stay pending
        await conn.execute(
            "UPDATE aa.outbox_event SET status = 'dispatched', dispatched_at = now()"
            " WHERE id = ANY(%s)",
            [[event[0] for event in events]],
        )
        return {"dispatched": len(events)}

    @engine.task(bulk_import)
    async def run_import(ref: Import, ctx: JobContext) -> dict[str, int]:
        conn: AsyncConnection[Any] = ctx.connection  # autocommit: one transaction per batch
        while True:
            async with conn.transaction():
                done = await _import_batch(conn, ref.import_id, svc.import_batch)
            if not done:
                break
            ctx.check_cancelled()  # a stopping worker leaves the rest for the next attempt
        row = await _one(
            conn,
            "UPDATE aa.import_job SET status = 'done' WHERE id = %s RETURNING committed, invalid",
            [ref.import_id],
        )
        assert row is not None
        return {"committed": row[0], "invalid": row[1]}

    @engine.task(virus_scan)
    async def scan(ref: Scan, ctx: JobContext) -> str:
        conn: AsyncConnection[Any] = ctx.connection
        row = await _one(
            conn, "SELECT content FROM aa.attachment WHERE id = %s", [ref.attachment_id]
        )
        if row is None:
            return "gone"
        verdict = await svc.scanner.scan(bytes(row[0]))  # the kind's timeout bounds it
        await conn.execute(
            "UPDATE aa.attachment SET virus_scan_status = %s, scanned_at = now() WHERE id = %s",
            [verdict, ref.attachment_id],
        )
        return verdict

    @engine.task(cleanup_jobs)
    async def cleanup(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
        # Stale-claim recovery and done-job retention are skiplock's own maintenance
        # (every maintenance_interval, one node at a time); this is the application's part.
        conn: AsyncConnection[Any] = ctx.connection
        compacted = await conn.execute(
            "DELETE FROM aa.outbox_event WHERE status = 'dispatched'"
            " AND dispatched_at < now() - %s",
            [svc.outbox_keep],
        )
        staged = await conn.execute(
            "DELETE FROM aa.import_row r USING aa.import_job j"
            " WHERE r.import_id = j.id AND j.status = 'done'"
        )
        return {"outbox_compacted": compacted.rowcount, "import_rows_removed": staged.rowcount}


async def _import_batch(conn: AsyncConnection[Any], import_id: int, size: int) -> int:
    """Validate and commit the next ``size`` staged rows; record the progress. Returns how
    many rows it handled (0: the import is complete)."""
    cur = await conn.execute(
        "SELECT r.row_no, r.data, j.tenant, j.type_key FROM aa.import_row r"
        " JOIN aa.import_job j ON j.id = r.import_id WHERE r.import_id = %s"
        " AND r.status = 'staged' ORDER BY r.row_no LIMIT %s FOR UPDATE OF r",
        [import_id, size],
    )
    rows = await cur.fetchall()
    committed = 0
    for row_no, data, tenant, type_key in rows:
        key, attributes = data.get("key"), data.get("attributes", {})
        error = (
            None
            if isinstance(key, str) and key and isinstance(attributes, dict)
            else ("a row needs a non-empty text 'key' and an object 'attributes'")
        )
        if error is None:
            await conn.execute(
                "INSERT INTO aa.entity (tenant, type_key, key, attributes) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (tenant, type_key, key)"
                " DO UPDATE SET attributes = EXCLUDED.attributes",
                [tenant, type_key, key, Jsonb(attributes)],
            )
            committed += 1
        await conn.execute(
            "UPDATE aa.import_row SET status = %s, error = %s WHERE import_id = %s AND row_no = %s",
            ["committed" if error is None else "invalid", error, import_id, row_no],
        )
    await conn.execute(
        "UPDATE aa.import_job SET status = 'running', committed = committed + %s,"
        " invalid = invalid + %s WHERE id = %s",
        [committed, len(rows) - committed, import_id],
    )
    return len(rows)


async def _one(
    conn: AsyncConnection[Any], query: LiteralString, params: list[Any]
) -> tuple[Any, ...] | None:
    cur = await conn.execute(query, params)
    return await cur.fetchone()
