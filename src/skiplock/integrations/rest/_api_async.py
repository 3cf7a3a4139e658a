"""The REST API's handlers over an engine (async source; ``_api.py`` is the sync twin).

:class:`AsyncRestApi` turns a framework-neutral :class:`Request` into a
:class:`Response`: it asks the authorization hook first, parses the path, query and body
into the pydantic models, calls the engine's admin API and maps its errors to problem
details. Views built on this layer (HTML pages) reuse :meth:`AsyncRestApi.authorize`
and the data methods (``list_jobs``, ``get_job``, ...), which return the same
JSON-ready data as the responses.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from skiplock.core import SkiplockError, StoreError, audit_event_json, job_json
from skiplock.engine import AsyncEngine

from . import models as m
from ._auth import AsyncAuthorize, Permission, check_hook, identity_of
from ._http import Request, Response, json_response
from ._problems import InternalError, NotAuthenticated, Problem
from ._spec import BY_ID, OPENAPI_PATH, openapi_document
from ._support import (
    Call,
    iso,
    page,
    parse_body,
    parse_job_id,
    parse_query,
    problem_for,
    takes_actor,
    typed,
)

logger = logging.getLogger("skiplock.rest")


class AsyncRestApi:
    """The REST admin API of an :class:`~skiplock.AsyncEngine`, framework-neutral.

    ``authorize`` is required (deny by default, see :class:`AsyncAuthorize`): a
    missing hook raises TypeError here, so no binding can mount the API without one.
    The caller's identity the hook returns is the actor of every change in the audit
    trail.
    """

    def __init__(self, engine: AsyncEngine, *, authorize: AsyncAuthorize) -> None:
        if not isinstance(engine, AsyncEngine):
            expected = AsyncEngine.__name__
            raise TypeError(f"expected a skiplock {expected}, got {type(engine).__name__}")
        check_hook(authorize)
        if True:  # ASYNC
            pass
        else:
            if inspect.iscoroutinefunction(authorize):
                raise TypeError("a coroutine function as authorize hook needs an AsyncEngine")
        self._engine = engine
        self._authorize = authorize

    @property
    def engine(self) -> AsyncEngine:
        """The engine the API works on."""
        return self._engine

    # ---- requests -----------------------------------------------------------------------

    async def handle(self, operation_id: str, request: Request) -> Response:
        """The response to ``request`` for the operation ``operation_id`` (an ``id`` of
        :data:`OPERATIONS`). The hook is asked first, before anything is parsed, read or
        changed; every error is a problem response (an unexpected one a 500, logged on
        ``skiplock.rest``)."""
        op = BY_ID[operation_id]
        try:
            actor = await self.authorize(request, op.permission)
            call = Call(
                path=request.path,
                actor=actor,
                job_id=parse_job_id(request) if op.job_path else 0,
                query=parse_query(op.query, request.query),
                # Writes also refuse form bodies (the cross-site form check).
                body=parse_body(op.body, request, required=op.body_required)
                if op.permission is Permission.WRITE
                else None,
            )
            try:
                return await self._dispatch(op.id, call)
            except SkiplockError as exc:
                raise problem_for(exc) from exc
        except Problem as problem:
            return problem.response(request.path)
        except Exception:
            logger.exception("REST API error on %s %s", request.method, request.path)
            return InternalError("an unexpected error; see the server's log").response(request.path)

    async def openapi(self, request: Request) -> Response:
        """The OpenAPI document (read permission), for ``<mount>/openapi.json``: its
        ``servers`` entry is the mount point, taken from the request's path."""
        try:
            await self.authorize(request, Permission.READ)
        except Problem as problem:
            return problem.response(request.path)
        except Exception:
            logger.exception("REST API error on %s %s", request.method, request.path)
            return InternalError("an unexpected error; see the server's log").response(request.path)
        return json_response(openapi_document(request.path.removesuffix(OPENAPI_PATH)))

    async def authorize(self, request: Request, permission: Permission) -> str:
        """The caller's identity if the hook grants ``permission``; raises
        :class:`NotAuthenticated` (401) or :class:`Forbidden` (403) otherwise, and
        TypeError for a hook that returned something else."""
        outcome = self._authorize(request, permission)
        if True:  # ASYNC
            if inspect.isawaitable(outcome):
                outcome = await outcome
        identity = identity_of(outcome)
        if identity is None:
            raise NotAuthenticated("missing or invalid credentials")
        return identity

    # ---- the data (JSON-ready, as the responses hold it) ----------------------------------
    # They raise the engine's errors; problem_for() names the response of each.

    async def list_jobs(self, query: m.JobQuery) -> dict[str, Any]:
        """One page of jobs (``JobPage``)."""
        jobs = await self._engine.list_jobs(
            state=query.state,
            kind=query.kind,
            tenant=query.tenant,
            priority_min=query.priority_min,
            priority_max=query.priority_max,
            created_since=query.created_since,
            created_before=query.created_before,
            available_since=query.available_since,
            available_before=query.available_before,
            limit=query.limit + 1,
            after_id=None if query.cursor is None else int(query.cursor),
            descending=query.order == "desc",
        )
        return page(jobs, query.limit)

    async def dead_jobs(self, query: m.DeadJobQuery) -> dict[str, Any]:
        """One page of the dead-letter view (``JobPage``)."""
        jobs = await self._engine.dead_jobs(
            kind=query.kind,
            tenant=query.tenant,
            limit=query.limit + 1,
            after_id=None if query.cursor is None else int(query.cursor),
        )
        return page(jobs, query.limit)

    async def get_job(self, job_id: int) -> dict[str, Any]:
        """One job with its audit trail (``JobDetail``; the trail is empty unless the
        engine records one, J10)."""
        job = await self._engine.get_job(job_id)
        events = await self._engine.audit_trail(job_id)
        return job_json(job) | {"audit_trail": [audit_event_json(event) for event in events]}

    async def create_job(self, body: m.JobCreate, *, actor: str) -> tuple[dict[str, Any], bool]:
        """Enqueue a job; returns it (``Job``) and whether it was created (False: the
        existing job of the idempotency key)."""
        result = await self._change(
            "enqueue",
            body.kind,
            body.payload,
            priority=body.priority,
            tenant=body.tenant,
            idempotency_key=body.idempotency_key,
            max_attempts=body.max_attempts,
            available_at=body.available_at,
            delay=body.delay,
            actor=actor,
        )
        return job_json(await self._engine.get_job(result.id)), result.created

    async def retry_job(
        self, job_id: int, *, reset_attempts: bool = True, actor: str
    ) -> dict[str, Any]:
        """Replay a dead, failed or cancelled job (``Job``)."""
        job = await self._change("retry_job", job_id, reset_attempts=reset_attempts, actor=actor)
        return job_json(job)

    async def retry_dead(self, body: m.RetryDead, *, actor: str) -> dict[str, Any]:
        """Replay the dead jobs matching ``body`` (``RetriedJobs``)."""
        ids = await self._change(
            "retry_dead",
            kind=body.kind,
            tenant=body.tenant,
            reset_attempts=body.reset_attempts,
            actor=actor,
        )
        return {"retried": sorted(ids)}

    async def cancel_job(self, job_id: int, *, actor: str) -> dict[str, Any]:
        """Cancel a job (``Job``)."""
        return job_json(await self._change("cancel_job", job_id, actor=actor))

    async def fail_job(self, job_id: int, *, actor: str) -> dict[str, Any]:
        """Mark a job failed (``Job``)."""
        return job_json(await self._change("fail_job", job_id, actor=actor))

    async def delete_job(self, job_id: int, *, actor: str) -> dict[str, Any]:
        """Delete a job that is not running; returns it as it was (``Job``)."""
        return job_json(await self._change("delete_job", job_id, actor=actor))

    async def _change(self, name: str, *args: Any, actor: str, **options: Any) -> Any:
        """Call the engine's ``name`` on behalf of ``actor``: the one place the caller's
        identity goes to the audit trail, as ``actor=`` where the method records one."""
        method = getattr(self._engine, name)
        if takes_actor(method.__func__):
            options["actor"] = actor
        return await method(*args, **options)

    async def counts(self) -> dict[str, Any]:
        """Jobs per state, kind and tenant (``Counts``), by kind, tenant and state."""
        counts = sorted(
            await self._engine.counts(),
            key=lambda c: (c.kind, c.tenant is not None, c.tenant or "", c.state),
        )
        return {
            "counts": [
                {"state": c.state.value, "kind": c.kind, "tenant": c.tenant, "count": c.count}
                for c in counts
            ]
        }

    async def workers(self, query: m.WorkersQuery) -> dict[str, Any]:
        """The registered workers (``Workers``); StoreError if the store cannot tell."""
        report = await self._engine.health(worker_timeout=query.worker_timeout)
        if not report.reachable or (report.schema is not None and not report.schema.installed):
            raise StoreError(report.problems[0])
        return {
            "checked_at": iso(report.checked_at),
            "workers": [worker.to_dict() for worker in report.workers],
        }

    async def health(self, query: m.HealthQuery) -> dict[str, Any]:
        """The health report (``HealthReport``), healthy or not."""
        report = await self._engine.health(
            max_pending_age=query.max_pending_age,
            worker_timeout=query.worker_timeout,
            max_dead=query.max_dead,
        )
        return report.to_dict()

    # ---- the operations -------------------------------------------------------------------

    async def _dispatch(self, operation_id: str, call: Call) -> Response:
        match operation_id:
            case "listJobs":
                return json_response(await self.list_jobs(typed(call.query, m.JobQuery)))
            case "createJob":
                return await self._create_job(call)
            case "getJob":
                return json_response(await self.get_job(call.job_id))
            case "deleteJob":
                return json_response(await self.delete_job(call.job_id, actor=call.actor))
            case "retryJob":
                return await self._retry_job(call)
            case "cancelJob":
                return json_response(await self.cancel_job(call.job_id, actor=call.actor))
            case "failJob":
                return json_response(await self.fail_job(call.job_id, actor=call.actor))
            case "listDeadJobs":
                return json_response(await self.dead_jobs(typed(call.query, m.DeadJobQuery)))
            case "retryDeadJobs":
                body = typed(call.body, m.RetryDead)
                return json_response(await self.retry_dead(body, actor=call.actor))
            case "getCounts":
                return json_response(await self.counts())
            case "listWorkers":
                return json_response(await self.workers(typed(call.query, m.WorkersQuery)))
            case "getHealth":
                return json_response(await self.health(typed(call.query, m.HealthQuery)))
        raise AssertionError(f"no handler for {operation_id}")

    async def _create_job(self, call: Call) -> Response:
        job, created = await self.create_job(typed(call.body, m.JobCreate), actor=call.actor)
        if not created:
            return json_response(job)
        return json_response(job, 201, {"Location": f"{call.path.rstrip('/')}/{job['id']}"})

    async def _retry_job(self, call: Call) -> Response:
        options = typed(call.body, m.RetryOptions)
        job = await self.retry_job(
            call.job_id, reset_attempts=options.reset_attempts, actor=call.actor
        )
        return json_response(job)
