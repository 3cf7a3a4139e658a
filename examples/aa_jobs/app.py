"""The web application: the platform's business endpoints, which enqueue jobs in the
same transaction as their own writes, the operators' switches, and skiplock's REST API,
dashboard, probes and metrics behind one token hook."""

from __future__ import annotations

import base64
import hmac
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field

from skiplock import RateLimit, ValidationError
from skiplock.integrations.fastapi import (
    create_dashboard_router,
    create_metrics_router,
    create_probes_router,
    create_router,
    mount,
    transaction,
    worker_lifespan,
)
from skiplock.integrations.rest import NotAuthenticated, Permission
from skiplock.integrations.rest import Request as RestRequest

from . import controls
from .indexes import EntityType, IndexChange, Reindex, check_name, gin_backfill, index_sync, reindex
from .jobs import (
    TENANT_DEFAULTS,
    AaJobs,
    Email,
    Import,
    Outbox,
    Scan,
    bulk_import,
    email_send,
    outbox_dispatch,
    virus_scan,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

CHALLENGE = 'Basic realm="aa_jobs"'


class TenantIn(BaseModel):
    id: str = Field(pattern=r"^[a-z][a-z0-9-]{0,39}$")
    name: str


class UserIn(BaseModel):
    email: str


class ImportIn(BaseModel):
    type_key: str
    rows: list[dict[str, Any]] = Field(max_length=100_000)


class AttributeIn(BaseModel):
    searchable: bool
    data_type: Literal["text", "numeric"] = "text"


class AttachmentIn(BaseModel):
    name: str
    content: str


class SwitchIn(BaseModel):
    mode: Literal["ok", "fail", "stall"]


class PauseIn(BaseModel):
    kind: str | None = None
    tenant: str | None = None


class LimitIn(BaseModel):
    rps: float = Field(gt=0)
    burst: int = Field(ge=1)


def operator_of(tokens: Mapping[str, str], authorization: str | None) -> str | None:
    """The operator a header names: ``Bearer <token>``, or ``Basic`` with the operator's
    name and token (what a browser sends for the dashboard). None: not signed in."""
    scheme, _, value = (authorization or "").partition(" ")
    user = None
    if scheme.lower() == "basic":
        try:
            user, _, value = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return None
    elif scheme.lower() != "bearer":
        return None
    for token, name in tokens.items():
        if hmac.compare_digest(token.encode(), value.encode()) and user in (None, name):
            return name
    return None


def operator(request: Request) -> str:
    """FastAPI dependency of the operators' own endpoints."""
    who = operator_of(request.app.state.tokens, request.headers.get("authorization"))
    if who is None:
        raise HTTPException(401, "sign in", headers={"WWW-Authenticate": CHALLENGE})
    return who


Operator = Annotated[str, Depends(operator)]


def create_app(
    jobs: AaJobs, *, tokens: Mapping[str, str], embedded_worker: bool = True, **worker: Any
) -> FastAPI:
    """The app on ``jobs``; ``tokens`` maps each admin token to its operator's name.
    ``embedded_worker`` runs a worker inside the app (``worker``: its options)."""
    engine = jobs.engine
    svc = jobs.services

    def authorize(request: RestRequest, permission: Permission) -> str:
        # Every operator may read and write; the name is the audit trail's actor.
        who = operator_of(tokens, request.header("authorization"))
        if who is None:
            raise NotAuthenticated("sign in", challenge=CHALLENGE)
        return who

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with jobs.store:  # opened (schema checked) first, closed last
            if not embedded_worker:
                yield
                return
            async with worker_lifespan(engine, **worker)(app):
                yield

    app = FastAPI(title="AA_JOB reference application", lifespan=lifespan)

    @app.exception_handler(ValidationError)
    async def refused(request: Request, exc: ValidationError) -> JSONResponse:
        # What skiplock refused (a blank scope, an unknown kind): the caller's to fix.
        return JSONResponse({"detail": str(exc)}, status_code=422)

    app.state.tokens = dict(tokens)
    app.state.jobs = jobs
    mount(app, create_router(engine, authorize=authorize), prefix="/admin/jobs")
    mount(app, create_dashboard_router(engine, authorize=authorize), prefix="/admin/dashboard")
    mount(app, create_probes_router(engine))
    mount(
        app, create_metrics_router(engine, metrics=jobs.metrics), dependencies=[Depends(operator)]
    )
    emails, dispatches = engine.declare(email_send), engine.declare(outbox_dispatch)
    imports, scans = engine.declare(bulk_import), engine.declare(virus_scan)
    index_syncs, backfills = engine.declare(index_sync), engine.declare(gin_backfill)
    reindexes = engine.declare(reindex)

    @app.post("/tenants", status_code=201)
    async def onboard(tenant: TenantIn, conn: Any = transaction(engine)) -> dict[str, Any]:
        # The spec's default set: metadata.rate_limit.<job_kind> = {rps, burst}.
        limits = {kind: {"rps": r.rps, "burst": r.burst} for kind, r in TENANT_DEFAULTS.items()}
        await conn.execute(
            "INSERT INTO aa.tenant (id, name, metadata) VALUES (%s, %s, %s)",
            [tenant.id, tenant.name, Jsonb({"rate_limit": limits})],
        )
        return {"id": tenant.id, "rate_limit": limits}

    @app.put("/tenants/{tenant}/limits/{kind}")
    async def set_limit(tenant: str, kind: str, limit: LimitIn, who: Operator) -> dict[str, Any]:
        async with jobs.store.transaction() as conn:  # an unknown kind rolls it back
            cur = await conn.execute(
                "UPDATE aa.tenant SET metadata = jsonb_set(metadata, ARRAY['rate_limit', %s],"
                " %s) WHERE id = %s",
                [kind, Jsonb(limit.model_dump()), tenant],
            )
            if cur.rowcount == 0:
                raise HTTPException(404, f"no tenant {tenant!r}")
            await controls.apply_tenant_limits(
                engine, who, tenant, {kind: RateLimit(limit.rps, limit.burst)}
            )
        return {"tenant": tenant, "kind": kind, **limit.model_dump()}

    @app.post("/tenants/{tenant}/users", status_code=201)
    async def sign_up(tenant: str, user: UserIn, conn: Any = transaction(engine)) -> dict[str, Any]:
        # One transaction: the user, its outbox event, the welcome e-mail and the dispatch.
        cur = await conn.execute(
            "INSERT INTO aa.app_user (tenant, email) SELECT id, %s FROM aa.tenant WHERE id = %s"
            " RETURNING id",
            [user.email, tenant],
        )
        if (row := await cur.fetchone()) is None:
            raise HTTPException(404, f"no tenant {tenant!r}")
        user_id = row[0]
        await conn.execute(
            "INSERT INTO aa.outbox_event (tenant, topic, body) VALUES (%s, 'user.created', %s)",
            [tenant, Jsonb({"user_id": user_id, "email": user.email})],
        )
        mail = Email(to=user.email, template="welcome", reference=f"welcome-{uuid.uuid4()}")
        sent = await emails.enqueue(mail, tenant=tenant, connection=conn)
        dispatch = await dispatches.enqueue(Outbox(), tenant=tenant, connection=conn)
        return {"user": user_id, "email_job": sent.id, "outbox_job": dispatch.id}

    @app.post("/tenants/{tenant}/suppressions", status_code=201)
    async def suppress(tenant: str, user: UserIn, conn: Any = transaction(engine)) -> None:
        await conn.execute(
            "INSERT INTO aa.suppression VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [tenant, user.email],
        )

    @app.post("/tenants/{tenant}/imports", status_code=201)
    async def upload(
        tenant: str, body: ImportIn, conn: Any = transaction(engine)
    ) -> dict[str, int]:
        cur = await conn.execute(
            "INSERT INTO aa.import_job (tenant, type_key, total) VALUES (%s, %s, %s) RETURNING id",
            [tenant, body.type_key, len(body.rows)],
        )
        (import_id,) = await cur.fetchone()
        async with conn.cursor() as staging:
            await staging.executemany(
                "INSERT INTO aa.import_row (import_id, row_no, data) VALUES (%s, %s, %s)",
                [(import_id, n, Jsonb(row)) for n, row in enumerate(body.rows)],
            )
        job = await imports.enqueue(Import(import_id), tenant=tenant, connection=conn)
        await conn.execute(
            "UPDATE aa.import_job SET job_id = %s WHERE id = %s", [job.id, import_id]
        )
        return {"import": import_id, "job": job.id}

    @app.get("/imports/{import_id}")
    async def import_progress(import_id: int, conn: Any = transaction(engine)) -> dict[str, Any]:
        cur = await conn.execute(
            "SELECT status, total, committed, invalid, job_id FROM aa.import_job WHERE id = %s",
            [import_id],
        )
        row = await cur.fetchone()
        if row is None:
            raise HTTPException(404, "no such import")
        return dict(zip(("status", "total", "committed", "invalid", "job"), row, strict=True))

    @app.post("/types/{type_key}", status_code=201)
    async def add_type(type_key: str, conn: Any = transaction(engine)) -> None:
        _valid(type_key)
        await conn.execute(
            "INSERT INTO aa.entity_type VALUES (%s) ON CONFLICT DO NOTHING", [type_key]
        )

    @app.put("/types/{type_key}/attributes/{attribute}")
    async def toggle_attribute(
        type_key: str, attribute: str, body: AttributeIn, conn: Any = transaction(engine)
    ) -> dict[str, int]:
        _valid(type_key, attribute)
        await conn.execute(
            "INSERT INTO aa.entity_type_attribute (type_key, attribute, searchable, data_type)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (type_key, attribute) DO UPDATE"
            " SET searchable = EXCLUDED.searchable, data_type = EXCLUDED.data_type",
            [type_key, attribute, body.searchable, body.data_type],
        )
        job = await index_syncs.enqueue(IndexChange(type_key, attribute), connection=conn)
        return {"job": job.id}

    @app.put("/types/{type_key}/external-source")
    async def external_source(
        type_key: str, enabled: bool, conn: Any = transaction(engine)
    ) -> dict[str, int]:
        _valid(type_key)
        await conn.execute(
            "UPDATE aa.entity_type SET is_external_source_target = %s WHERE type_key = %s",
            [enabled, type_key],
        )
        job = await backfills.enqueue(EntityType(type_key), connection=conn)
        return {"job": job.id}

    @app.get("/types/{type_key}")
    async def type_status(type_key: str, conn: Any = transaction(engine)) -> dict[str, Any]:
        cur = await conn.execute(
            "SELECT gin_status, coalesce((SELECT jsonb_object_agg(attribute, index_status)"
            " FROM aa.entity_type_attribute a WHERE a.type_key = t.type_key), '{}')"
            " FROM aa.entity_type t WHERE type_key = %s",
            [type_key],
        )
        row = await cur.fetchone()
        if row is None:
            raise HTTPException(404, "no such type")
        return {"gin_status": row[0], "index_status": row[1]}

    @app.post("/tenants/{tenant}/reindex/{type_key}", status_code=201)
    async def rebuild(tenant: str, type_key: str) -> dict[str, int]:
        job = await reindexes.enqueue(Reindex(type_key), tenant=tenant)
        return {"job": job.id}

    @app.post("/tenants/{tenant}/attachments", status_code=201)
    async def attach(
        tenant: str, body: AttachmentIn, conn: Any = transaction(engine)
    ) -> dict[str, int]:
        cur = await conn.execute(
            "INSERT INTO aa.attachment (tenant, name, content) VALUES (%s, %s, %s) RETURNING id",
            [tenant, body.name, body.content.encode()],
        )
        (attachment_id,) = await cur.fetchone()
        job = await scans.enqueue(Scan(attachment_id), tenant=tenant, connection=conn)
        return {"attachment": attachment_id, "job": job.id}

    @app.get("/attachments/{attachment_id}")
    async def attachment(attachment_id: int, conn: Any = transaction(engine)) -> dict[str, Any]:
        cur = await conn.execute(
            "SELECT name, virus_scan_status FROM aa.attachment WHERE id = %s", [attachment_id]
        )
        row = await cur.fetchone()
        if row is None:
            raise HTTPException(404, "no such attachment")
        return {"name": row[0], "virus_scan_status": row[1]}

    @app.put("/ops/switches/{service}")
    async def switch(
        service: Literal["provider", "webhooks", "scanner"], body: SwitchIn, who: Operator
    ) -> dict[str, str]:
        getattr(svc, service).set_mode(body.mode)
        return {service: body.mode, "by": who}

    @app.post("/ops/pause")
    async def pause(body: PauseIn, who: Operator) -> dict[str, Any]:
        await controls.pause(engine, who, kind=body.kind, tenant=body.tenant)
        return {"paused": body.model_dump(), "by": who}

    @app.post("/ops/resume")
    async def resume(body: PauseIn, who: Operator) -> dict[str, Any]:
        if not await controls.resume(engine, who, kind=body.kind, tenant=body.tenant):
            scope = f"kind={body.kind or '*'} tenant={body.tenant or '*'}"
            raise HTTPException(404, f"no pause of {scope}")
        return {"resumed": body.model_dump(), "by": who}

    @app.get("/ops/paused")
    async def paused(who: Operator) -> list[Any]:
        return await controls.paused(engine)

    return app


def _valid(*names: str) -> None:
    try:
        check_name(*names)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
