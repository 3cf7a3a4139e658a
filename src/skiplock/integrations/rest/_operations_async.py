"""The REST API's operations (async source; ``_operations.py`` is the sync twin).

:data:`OPERATIONS` is the one table of the API: each operation's id, route, permission,
models and handler. A handler declares its row (``@_operation``) and, in its docstring,
the operation's summary and description. :class:`~._api_async.AsyncRestApi` dispatches
on it, every binding mounts its routes, and :func:`openapi_document` is generated from
it, so they cannot drift apart. A handler is a typed call on the engine's operator
acting as the caller (:meth:`AsyncEngine.operator <skiplock.AsyncEngine.operator>`): it
answers with what the operator returns and reads nothing again, but for the job an
enqueue created.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol

from skiplock.core import (
    DatabaseUnavailableError,
    EnqueueFields,
    StoreError,
    audit_event_json,
    job_json,
)
from skiplock.core.rules import describe, payload_filter, running_jobs_json

from . import models as m
from ._auth import Permission
from ._http import Response, json_response
from ._operations_runtime_async import RUNTIME
from ._problems import NotFound
from ._spec import Operation, openapi_of
from ._support import Call, counts_json, cursor, iso, page, skipped_json, typed

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic import BaseModel

    from skiplock.core import Job
    from skiplock.engine import AsyncOperator, AsyncReader


class AsyncHandler(Protocol):
    """What answers an operation: given the engine's operator acting as the caller and
    the parsed request, the response. It raises the engine's errors
    (:func:`~._support.problem_for` names the problem of each)."""

    async def __call__(self, ops: AsyncOperator, call: Call, /) -> Response: ...


class AsyncReadHandler(Protocol):
    """What answers a read (a GET): as :class:`AsyncHandler`, through the engine's
    operator or its reader (:meth:`AsyncEngine.reader <skiplock.AsyncEngine.reader>`,
    over a hot standby when the engine has ``reads=``)."""

    async def __call__(self, ops: AsyncOperator | AsyncReader, call: Call, /) -> Response: ...


def _job(job: Job, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(job_json(job), status, headers)


# ---- the table ---------------------------------------------------------------------------

_TABLE: list[Operation[AsyncHandler]] = []


def _operation(
    id: str, route: str, response: type[BaseModel], **options: Any
) -> Callable[[AsyncHandler], AsyncHandler]:
    """Add the handler it decorates to the table as the operation ``id`` on ``route``
    (``"METHOD /path"``; a GET needs the read permission, any other method the write
    one). The first line of the handler's docstring is the operation's summary, the
    paragraph after it its description; ``options`` are the other fields of
    :class:`Operation`."""
    method, _, path = route.partition(" ")
    permission = Permission.READ if method == "GET" else Permission.WRITE

    def add(handler: AsyncHandler) -> AsyncHandler:
        summary, _, description = inspect.cleandoc(handler.__doc__ or "").partition("\n\n")
        spec = (id, method, path, permission, summary, " ".join(description.split()), response)
        _TABLE.append(Operation(*spec, **options, handler=handler))
        return handler

    return add


#: The read operations' handlers by id: the door answers them through its reads.
READS: dict[str, AsyncReadHandler] = {}


def _read_operation(
    id: str, route: str, response: type[BaseModel], **options: Any
) -> Callable[[AsyncReadHandler], AsyncReadHandler]:
    """:func:`_operation` for a GET, whose handler also reads through a reader."""
    if not route.startswith("GET "):
        raise ValueError(f"a read operation is a GET, not {route!r}")

    def add(handler: AsyncReadHandler) -> AsyncReadHandler:
        _operation(id, route, response, **options)(handler)
        READS[id] = handler
        return handler

    return add


# ---- the handlers, in the table's order --------------------------------------------------


@_read_operation("listJobs", "GET /jobs", m.JobPage, query=m.JobQuery)
async def _list_jobs(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List jobs

    Jobs matching every filter, ordered by id, one keyset page: pass `next_cursor` as
    `cursor` (with the same filters) for the next one. `payload`, `error` and
    `idempotency_key` search the whole table (docs/search.md, "The search filters"); a
    page that stopped at its read budget says `"partial": true`."""
    query = typed(call.query, m.JobQuery)
    jobs = await ops.list_jobs(
        state=query.state,
        kind=query.kind,
        tenant=query.tenant,
        priority_min=query.priority_min,
        priority_max=query.priority_max,
        created_since=query.created_since,
        created_before=query.created_before,
        available_since=query.available_since,
        available_before=query.available_before,
        payload=None if query.payload is None else payload_filter(query.payload),
        error=query.error,
        idempotency_key=query.idempotency_key,
        limit=query.limit + 1,
        after_id=cursor(query.cursor),
        descending=query.order == "desc",
    )
    return json_response(page(jobs, query.limit))


@_operation("createJob", "POST /jobs", m.Job, status=201, body=m.JobCreate)
async def _create_job(ops: AsyncOperator, call: Call) -> Response:
    """Enqueue a job

    Create a job (201). With an `idempotency_key` that already exists, nothing is created
    and the existing job is returned (200), with this payload, due time and priority if
    `idempotency_conflict` is `replace_pending` and it was still pending."""
    body = typed(call.body, m.JobCreate)
    # Every job option by its declared name (JobCreate has them all: a drift test).
    options = {name: getattr(body, name) for name in EnqueueFields.names()}
    result = await ops.enqueue(body.kind, body.payload, **options)
    # The one read after a change: enqueue answers with the id, the response is the job.
    job = await ops.get_job(result.id)
    if not result.created:  # the existing job of the idempotency key
        return _job(job)
    return _job(job, 201, {"Location": f"{call.path.rstrip('/')}/{job.id}"})


@_read_operation("getJob", "GET /jobs/{job_id}", m.JobDetail)
async def _get_job(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Get a job

    One job with its attempts, last error, payload and audit trail."""
    job = await ops.get_job(call.job_id)
    trail = [audit_event_json(event) for event in await ops.audit_trail(call.job_id)]
    return json_response(job_json(job) | {"audit_trail": trail})


@_read_operation("getJobAudit", "GET /jobs/{job_id}/audit", m.JobAudit)
async def _get_job_audit(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Get a job's audit trail

    The job's audited changes, oldest first, whether or not the job still exists: the
    trail of a deleted (discarded) job ends with its `job_discard` entry. 404 when there
    is neither a job nor a trail with this id."""
    events = await ops.audit_trail(call.job_id)
    if not events:
        await ops.get_job(call.job_id)  # JobNotFoundError (404) for an id never seen
    trail = [audit_event_json(event) for event in events]
    return json_response({"job_id": call.job_id, "audit_trail": trail})


@_read_operation("getJobWhy", "GET /jobs/{job_id}/why", m.JobWait)
async def _get_job_why(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Why a job waits

    Why the job has not started, from the rules a claim applies: due later, paused (by
    whom, since when), a rate limit (when the next token comes), a concurrency cap full
    (the running jobs holding it), no live worker for its kind and tenant, due jobs of
    its kind ahead of it; `ready` when nothing holds it back, `not_pending` for a job
    that is not pending."""
    return json_response((await ops.why(call.job_id)).to_json())


@_operation("deleteJob", "DELETE /jobs/{job_id}", m.Job)
async def _delete_job(ops: AsyncOperator, call: Call) -> Response:
    """Delete a job

    Delete (discard) a job that is not running; returns it as it was, payload included (an
    engine with the audit trail records the discard with the payload). A running job is a
    409: cancel it first."""
    return _job(await ops.delete_job(call.job_id))


@_operation(
    "retryJob", "POST /jobs/{job_id}/retry", m.Job, body=m.RetryOptions, body_required=False
)
async def _retry_job(ops: AsyncOperator, call: Call) -> Response:
    """Retry a job

    Replay a dead, failed or cancelled job: pending and due now, from attempt 0 unless
    `reset_attempts` is false. Another state is a 409."""
    options = typed(call.body, m.RetryOptions)
    return _job(await ops.retry_job(call.job_id, reset_attempts=options.reset_attempts))


@_operation("cancelJob", "POST /jobs/{job_id}/cancel", m.Job)
async def _cancel_job(ops: AsyncOperator, call: Call) -> Response:
    """Cancel a job

    A pending job is never claimed; a running one is asked to stop at its worker's next
    heartbeat. A finished job is a 409."""
    return _job(await ops.cancel_job(call.job_id))


@_operation("failJob", "POST /jobs/{job_id}/fail", m.Job)
async def _fail_job(ops: AsyncOperator, call: Call) -> Response:
    """Mark a job failed

    The manual stop: never tried again unless replayed. A succeeded or failed job is a 409."""
    return _job(await ops.fail_job(call.job_id))


@_read_operation("listDeadJobs", "GET /dlq", m.JobPage, query=m.DeadJobQuery, tag="dlq")
async def _dead_jobs(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List dead jobs (the DLQ)

    Dead jobs with their last error and payload, by id, one keyset page."""
    query = typed(call.query, m.DeadJobQuery)
    jobs = await ops.dead_jobs(
        kind=query.kind, tenant=query.tenant, limit=query.limit + 1, after_id=cursor(query.cursor)
    )
    return json_response(page(jobs, query.limit))


@_operation(
    "retryDeadJobs",
    "POST /dlq/retry",
    m.RetriedJobs,
    body=m.RetryDead,
    problems=(400, 409, 415, 422),
    tag="dlq",
)
async def _retry_dead(ops: AsyncOperator, call: Call) -> Response:
    """Retry dead jobs in bulk

    Replay every dead job matching the filter (every dead job without one); returns their
    ids. With `through` and `expected` (the largest id and the number of dead jobs the
    operator was shown), only dead jobs up to `through`, and only if `expected` match: a
    409 `selection-changed` problem with the `count` now otherwise, and nothing changes;
    `skipped` lists the jobs someone else changed meanwhile."""
    body = typed(call.body, m.RetryDead)
    result = await ops.retry_dead(
        kind=body.kind,
        tenant=body.tenant,
        reset_attempts=body.reset_attempts,
        through=body.through,
        expected=body.expected,
    )
    return json_response({"retried": list(result), "skipped": skipped_json(result)})


@_operation(
    "actOnJobs", "POST /bulk", m.BulkResult, body=m.BulkAction, problems=(400, 409, 415, 422)
)
async def _act_on_jobs(ops: AsyncOperator, call: Call) -> Response:
    """Act on confirmed jobs in bulk

    Retry, cancel, mark failed or discard exactly the jobs listed, each only in the state
    it was shown in (`act_as_confirmed`): if one no longer is, a 409 `selection-changed`
    problem with the `count` of those that still are, and nothing changes. `changed` lists
    the jobs changed, `skipped` those that changed meanwhile, with why."""
    body = typed(call.body, m.BulkAction)
    jobs = {job.id: job.state for job in body.jobs}
    result = await ops.act_as_confirmed(body.action, jobs, reset_attempts=body.reset_attempts)
    return json_response({"changed": list(result), "skipped": skipped_json(result)})


@_operation("purgeDeadJobs", "POST /dlq/purge", m.PurgedJobs, body=m.PurgeDead, tag="dlq")
async def _purge_dead(ops: AsyncOperator, call: Call) -> Response:
    """Delete dead jobs in bulk

    Delete the dead jobs matching every filter given (every dead job without one), each
    only if it is still dead; with `dry_run`, only count them. Count first, then purge
    with `up_to_id` from the count: a job that died since is not deleted."""
    body = typed(call.body, m.PurgeDead)
    done = await ops.purge_dead(
        kind=body.kind,
        tenant=body.tenant,
        died_before=body.died_before,
        error=body.error,
        up_to_id=body.up_to_id,
        dry_run=body.dry_run,
    )
    return json_response(done.to_dict())


@_read_operation("getCounts", "GET /counts", m.Counts, tag="queue")
async def _counts(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Count jobs

    The number of jobs per state, kind and tenant."""
    return json_response(counts_json(await ops.counts()))


@_read_operation("listWorkers", "GET /workers", m.Workers, query=m.WorkersQuery, tag="queue")
async def _workers(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List workers

    The registered workers, their heartbeats, slots and version, what they were asked
    to do, and the jobs each runs now (since when)."""
    query = typed(call.query, m.WorkersQuery)
    report = await ops.health(worker_timeout=query.worker_timeout)
    if not report.reachable:
        raise DatabaseUnavailableError.unreachable(report.error)
    if report.schema is not None and not report.schema.installed:
        raise StoreError(report.problems[0])
    jobs = await ops.worker_jobs() if report.workers else {}
    workers = [
        w.to_dict() | {"jobs": running_jobs_json(jobs.get(w.id, []))} for w in report.workers
    ]
    return json_response({"checked_at": iso(report.checked_at), "workers": workers})


@_read_operation("getHealth", "GET /health", m.HealthReport, query=m.HealthQuery, tag="queue")
async def _health(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Health report

    The health of the queue and its workers (R9). Status 200 whether healthy or not: read
    `healthy` and `problems`."""
    query = typed(call.query, m.HealthQuery)
    report = await ops.health(
        max_pending_age=query.max_pending_age,
        worker_timeout=query.worker_timeout,
        max_dead=query.max_dead,
    )
    return json_response(report.to_dict())


@_read_operation("getRetention", "GET /retention", m.Retention, tag="queue")
async def _retention(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """Retention view

    Per retention purge (succeeded jobs, audit events): its window, how many rows are
    older than it now (what its next run removes; past 10,000 audit events an estimate,
    `estimated`), and its last run: when it finished, how long it took, what it removed."""
    return json_response((await ops.retention()).to_dict())


@_read_operation("listPauses", "GET /pauses", m.Pauses, tag="controls")
async def _list_pauses(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List pauses

    The pauses in force: kinds, tenants and (kind, tenant) pairs whose jobs are not claimed."""
    return json_response({"pauses": [p.to_json() for p in await ops.paused()]})


@_operation("pause", "POST /pauses", m.Pause, body=m.PauseCreate, tag="controls")
async def _pause(ops: AsyncOperator, call: Call) -> Response:
    """Pause a kind, a tenant or a pair

    Stop claiming the jobs of `kind` (every tenant), `tenant` (every kind) or both: they
    stay pending with their attempts; running jobs finish. Every worker applies it within
    `controls_refresh` (1 s by default). Pausing again keeps `since` and takes the new
    `reason`. A `kind` this service does not declare is a 422 naming the known kinds,
    unless `allow_unknown_kind` (a kind another service declares)."""
    body = typed(call.body, m.PauseCreate)
    pause = await ops.pause(
        kind=body.kind,
        tenant=body.tenant,
        reason=body.reason,
        allow_unknown_kind=body.allow_unknown_kind,
    )
    return json_response(pause.to_json())


@_operation(
    "resume", "POST /pauses/resume", m.Pause, body=m.PauseScope, not_found=True, tag="controls"
)
async def _resume(ops: AsyncOperator, call: Call) -> Response:
    """Lift a pause

    Lift the pause of exactly this `kind` and `tenant` (as it was set); returns it. None is
    a 404."""
    body = typed(call.body, m.PauseScope)
    lifted = await ops.resume(kind=body.kind, tenant=body.tenant)
    if lifted is None:
        raise NotFound(f"no pause of {describe(body.kind, body.tenant)}")
    return json_response(lifted.to_json())


@_read_operation("listLimits", "GET /limits", m.Limits, tag="controls")
async def _list_limits(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List limits

    The rate limits and provider caps set at run time (the code's and settings' are not
    listed)."""
    return json_response({"limits": [x.to_json() for x in await ops.limits()]})


@_operation("setLimit", "POST /limits", m.RateLimit, body=m.LimitSet, tag="controls")
async def _set_limit(ops: AsyncOperator, call: Call) -> Response:
    """Set a rate limit

    Set `rps` and `burst` for `kind` and `tenant`, for `kind` alone (its default for every
    tenant without its own), or for `provider` alone (a cap across its kinds), replacing the
    one set before. It wins over the code's and settings' limits; every worker applies it
    within `controls_refresh`. A `kind` this service does not declare is a 422 naming the
    known kinds, unless `allow_unknown_kind` (a kind another service declares)."""
    body = typed(call.body, m.LimitSet)
    limit = await ops.set_limit(
        kind=body.kind,
        tenant=body.tenant,
        provider=body.provider,
        rps=body.rps,
        burst=body.burst,
        allow_unknown_kind=body.allow_unknown_kind,
    )
    return json_response(limit.to_json())


@_operation(
    "clearLimit",
    "POST /limits/clear",
    m.RateLimit,
    body=m.LimitScope,
    not_found=True,
    tag="controls",
)
async def _clear_limit(ops: AsyncOperator, call: Call) -> Response:
    """Clear a rate limit

    Remove the limit set for exactly this `kind` and `tenant`, or `provider`; returns it.
    None is a 404."""
    body = typed(call.body, m.LimitScope)
    cleared = await ops.clear_limit(kind=body.kind, tenant=body.tenant, provider=body.provider)
    if cleared is None:
        what = body.provider or describe(body.kind, body.tenant)
        raise NotFound(f"no limit of {what} was set")
    return json_response(cleared.to_json())


for _id, _route, _response, _handler, _options in RUNTIME:  # their own module
    _add = _read_operation if _route.startswith("GET ") else _operation
    _add(_id, _route, _response, **_options)(_handler)

OPERATIONS: tuple[Operation[AsyncHandler], ...] = tuple(_TABLE)

#: The operations by id.
BY_ID: Mapping[str, Operation[AsyncHandler]] = {op.id: op for op in OPERATIONS}


def openapi_document(base_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API mounted at ``base_path`` (its ``servers``
    entry; the paths are relative to it), generated from :data:`OPERATIONS`."""
    return openapi_of(OPERATIONS, base_path)
