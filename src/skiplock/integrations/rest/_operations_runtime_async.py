"""The REST API's operations on run-time concurrency limits and on workers (issue 45)
(async source; ``_operations_runtime.py`` is the sync twin): the handlers and their
rows, which :mod:`._operations_async` adds to its one table (:data:`RUNTIME`, in
order)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import models as m
from ._http import Response, json_response
from ._problems import NotFound
from ._support import Call, typed

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic import BaseModel

    from skiplock.core.store import WorkerRequest
    from skiplock.engine import AsyncOperator, AsyncReader

    #: One operation of this module: its id, route, response model, handler and the other
    #: fields of its row (what ``_operation``, or ``_read_operation`` for a GET, takes).
    Row = tuple[str, str, type[BaseModel], Callable[..., Any], dict[str, Any]]


async def _list_concurrency(ops: AsyncOperator | AsyncReader, call: Call) -> Response:
    """List concurrency limits

    The concurrency limits set at run time: of a kind per node or cluster-wide, of a
    concurrency key (the declared ones are not listed)."""
    limits = await ops.concurrency_limits()
    return json_response({"concurrency": [x.to_json() for x in limits]})


async def _set_concurrency(ops: AsyncOperator, call: Call) -> Response:
    """Set a concurrency limit

    At most `limit` jobs of `kind` run at once, across the cluster (`scope` `cluster`,
    over its `cluster_limit`) or per worker process (`node`, over its `node_limit`); or
    at most `limit` jobs of concurrency `key` (cluster-wide, over the jobs' own
    `concurrency_limit`). Replaces the one set before; every worker applies it within
    `controls_refresh`. A `kind` this service does not declare is a 422 naming the known
    kinds, unless `allow_unknown_kind`."""
    # The body's fields are the call's arguments: kind, key, scope, limit and the opt-in.
    stored = await ops.set_concurrency(**dict(typed(call.body, m.ConcurrencySet)))
    return json_response(stored.to_json())


async def _clear_concurrency(ops: AsyncOperator, call: Call) -> Response:
    """Clear a concurrency limit

    Remove the concurrency limit set for exactly this `kind` and `scope`, or `key`: the
    declared limit applies again. Returns it; none is a 404."""
    body = typed(call.body, m.ConcurrencyTarget)
    cleared = await ops.clear_concurrency(kind=body.kind, key=body.key, scope=body.scope)
    if cleared is None:
        what = f"key {body.key}" if body.key is not None else f"kind {body.kind} ({body.scope})"
        raise NotFound(f"no concurrency limit of {what} was set")
    return json_response(cleared.to_json())


async def _drain_worker(ops: AsyncOperator, call: Call) -> Response:
    """Drain a worker

    Ask the worker `worker_id` (on any host: the request goes through the database) to
    stop claiming, give back its held jobs, let every running job finish however long it
    takes, then unregister and exit. It reads the request within its `controls_refresh`.
    Returns the request; no such registered worker is a 404."""
    return _requested(await ops.drain_worker(typed(call.body, m.WorkerTarget).worker_id))


async def _stop_worker(ops: AsyncOperator, call: Call) -> Response:
    """Stop a worker

    Ask the worker `worker_id` to stop gracefully, as on SIGTERM: stop claiming, give back
    its held jobs, let running jobs finish for up to its `shutdown_timeout`, then
    interrupt and release the rest to `pending` without using an attempt; unregister and
    exit. Returns the request; no such registered worker is a 404."""
    return _requested(await ops.stop_worker(typed(call.body, m.WorkerTarget).worker_id))


def _requested(request: WorkerRequest | None) -> Response:
    if request is None:
        raise NotFound("no such worker is registered")
    return json_response(request.to_json())


#: The operations of this module, in the table's order.
RUNTIME: tuple[Row, ...] = (
    (
        "listConcurrency",
        "GET /concurrency",
        m.ConcurrencyLimits,
        _list_concurrency,
        {"tag": "controls"},
    ),
    (
        "setConcurrency",
        "POST /concurrency",
        m.ConcurrencyLimit,
        _set_concurrency,
        {"body": m.ConcurrencySet, "tag": "controls"},
    ),
    (
        "clearConcurrency",
        "POST /concurrency/clear",
        m.ConcurrencyLimit,
        _clear_concurrency,
        {"body": m.ConcurrencyTarget, "not_found": True, "tag": "controls"},
    ),
    (
        "drainWorker",
        "POST /workers/drain",
        m.WorkerRequest,
        _drain_worker,
        {"body": m.WorkerTarget, "not_found": True, "tag": "queue"},
    ),
    (
        "stopWorker",
        "POST /workers/stop",
        m.WorkerRequest,
        _stop_worker,
        {"body": m.WorkerTarget, "not_found": True, "tag": "queue"},
    ),
)
