"""FastAPI (and any Starlette app): a worker for the lifetime of the app, the REST admin
API as a router, and the request's transaction for enqueueing.

* ``worker_lifespan(engine, concurrency=4)`` is a lifespan: pass it as
  ``FastAPI(lifespan=...)``, or enter it inside your own lifespan. It needs neither
  FastAPI nor Starlette: a lifespan is just a callable taking the app and returning an
  async context manager (Starlette's lifespan protocol). See docs/embedding.md.
* ``create_router(engine, authorize=...)``: the REST admin API (docs/rest.md).
* ``transaction(engine)``: a dependency giving the request a transaction of the engine's
  store, committed when the endpoint returns (docs/fastapi.md).
* ``create_dashboard_router(engine, authorize=...)``: the web dashboard
  (docs/dashboard.md), behind the same authorization hook.
* ``create_probes_router(engine)``: ``/livez`` and ``/readyz`` for Kubernetes probes,
  without authorization by design (they reveal nothing).
* ``create_metrics_router(engine)``: the queue's Prometheus metrics at ``/metrics``,
  with or without a worker in the process (docs/metrics.md).
* ``mount(app, router, prefix=...)``: how each of these routers is included: it
  refuses a router overlapping another skiplock router of the app (``MountConflict``)
  and, under a prefix, gives the REST API and the dashboard their answer to every other
  path there.

All but the lifespan import FastAPI when called (``pip install 'skiplock[fastapi]'``;
the dashboard also needs ``skiplock[dashboard]``, the metrics ``skiplock[prometheus]``).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

from skiplock.engine import AsyncEngine, AsyncWorker, Engine, Worker

from ._mounts import MountConflict

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from fastapi import APIRouter, FastAPI

    from skiplock.contrib.prometheus import PrometheusMetrics
    from skiplock.engine import WorkerOptions

    from .dashboard import DashboardOptions
    from .rest import AsyncAuthorize, AsyncRoute, Authorize, Route

__all__ = [
    "MountConflict",
    "WorkerLifespan",
    "create_dashboard_router",
    "create_metrics_router",
    "create_probes_router",
    "create_router",
    "mount",
    "transaction",
    "worker_lifespan",
]


class WorkerLifespan:
    """A lifespan running one worker of ``engine`` while the app runs.

    At startup it builds the worker (``engine.worker(**options)``, so processors
    registered until then count) and enters :meth:`AsyncWorker.in_background
    <skiplock.AsyncWorker.in_background>`: startup fails if the worker cannot register
    (database unreachable, schema missing). At shutdown, after the server has stopped
    taking requests, the worker stops claiming, running jobs get up to
    ``Settings.shutdown_timeout`` to finish and the rest are released to ``pending``; a
    worker crash is raised there. It installs no signal handlers: the server's own stay
    in charge (a SIGTERM to uvicorn shuts the app down, and so the worker). A sync
    :class:`~skiplock.Engine` runs its worker in a thread; entering and leaving it happen
    in a thread too, so the event loop is never blocked.

    The store is not opened or closed here: it belongs to the application (close it in
    your own lifespan, after this one).
    """

    def __init__(self, engine: AsyncEngine | Engine, **options: Unpack[WorkerOptions]) -> None:
        if not isinstance(engine, AsyncEngine | Engine):
            raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
        self._engine = engine
        # Iterables are read now: each startup builds its worker from the same values.
        kinds, tenants = options.get("kinds"), options.get("tenants")
        self._options: WorkerOptions = {
            **options,
            "kinds": None if kinds is None else frozenset(kinds),
            "tenants": None if tenants is None else frozenset(tenants),
        }
        self._worker: AsyncWorker | Worker | None = None

    @property
    def worker(self) -> AsyncWorker | Worker | None:
        """The worker from startup until it has stopped at shutdown (e.g. for a health
        check: its ``state`` is ``running``, then ``draining``), else None."""
        return self._worker

    def __call__(self, app: object) -> AbstractAsyncContextManager[None]:
        """The lifespan of ``app`` (which is not used)."""
        return self._lifespan()

    @asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        worker = self._engine.worker(**self._options)
        try:
            if isinstance(worker, AsyncWorker):
                async with worker.in_background():
                    self._worker = worker
                    yield
            else:
                async with _in_thread(worker):
                    self._worker = worker
                    yield
        finally:
            self._worker = None


@asynccontextmanager
async def _in_thread(worker: Worker) -> AsyncIterator[None]:
    """``worker.in_background()`` (which blocks while the worker starts and drains),
    entered and left in a thread so the event loop goes on meanwhile."""
    background = worker.in_background()
    await asyncio.to_thread(background.__enter__)
    try:
        yield
    except BaseException as exc:
        if not await asyncio.to_thread(background.__exit__, type(exc), exc, exc.__traceback__):
            raise
    else:
        await asyncio.to_thread(background.__exit__, None, None, None)


def worker_lifespan(
    engine: AsyncEngine | Engine, **options: Unpack[WorkerOptions]
) -> WorkerLifespan:
    """A lifespan that runs a worker of ``engine`` while the app runs (see
    :class:`WorkerLifespan`); ``options``: :class:`~skiplock.WorkerOptions`, as for
    ``engine.worker()``.

    ``FastAPI(lifespan=worker_lifespan(engine, concurrency=4))``, or inside your own
    lifespan: ``async with worker_lifespan(engine)(app): yield``.
    """
    return WorkerLifespan(engine, **options)


def create_router(
    engine: AsyncEngine | Engine,
    *,
    authorize: AsyncAuthorize | Authorize,
    prefix: str = "",
    tags: Sequence[str] = ("skiplock",),
    include_in_schema: bool = False,
) -> APIRouter:
    """The REST admin API of ``engine`` as a FastAPI router (docs/rest.md).

    Deny by default: ``authorize`` is required (TypeError without it). It is called
    with each request (:class:`~skiplock.integrations.rest.Request`) and the
    :class:`~skiplock.integrations.rest.Permission` the operation needs; it returns the
    caller's identity (the actor of the engine's operator that answers), None for a 401,
    or raises :class:`~skiplock.integrations.rest.Forbidden` for a 403. With an
    ``AsyncEngine`` it may be a coroutine function; a sync ``Engine`` runs it and the
    admin calls in the thread pool. Mount it with
    ``mount(app, router, prefix="/admin/jobs")`` (:func:`mount`). The API's own document is
    served at ``<prefix>/openapi.json`` (behind the hook); the operations stay out of the
    app's public OpenAPI document unless ``include_in_schema=True`` (then with their
    stable operation ids and schemas). Under a prefix, any other path or method there is
    a problem too (404, 405 with ``Allow``; ``OPTIONS``: 204 with ``Allow``), after the
    hook.
    """
    from ._fastapi import router
    from .rest import AsyncRestApi, RestApi

    routes = _routes(
        engine,
        lambda engine: AsyncRestApi(engine, authorize=authorize).routes(),
        lambda engine: RestApi(engine, authorize=authorize).routes(),  # type: ignore[arg-type]
    )
    return router(
        routes,
        namespace="skiplock.",
        door="REST API",
        prefix=prefix,
        tags=tags,
        include_in_schema=include_in_schema,
    )


def mount(app: FastAPI | APIRouter, router: APIRouter, *, prefix: str = "", **options: Any) -> None:
    """Include ``router``, made by one of this module's ``create_*_router`` functions, in
    ``app`` (a FastAPI app or an ``APIRouter``) at ``prefix``: ``app.include_router(router,
    prefix=prefix, **options)`` (``options``: ``include_router``'s, e.g. ``dependencies=``),
    after two things only this call can do, for it is told where the router goes:

    * it raises :class:`MountConflict` (a ValueError), before including anything, if the
      router's paths overlap those of a skiplock router mounted on ``app`` before (the
      REST API and the dashboard claim every path under their prefix; docs/dashboard.md,
      "Mounting");
    * under a prefix, the REST API and the dashboard answer every other path and method
      there themselves (404, 405 with ``Allow``, 204 for ``OPTIONS``, after the hook).

    ``app.include_router(router)`` serves the routes too, unchecked; the fallback then
    comes only from the ``prefix=`` given to the ``create_*_router`` function (never at
    the root of an app, where it would take the app's every unknown path).
    """
    from ._fastapi import mount as include

    include(app, router, prefix, options)


def transaction(engine: AsyncEngine | Engine, *, statement_timeout: float | None = None) -> Any:
    """A FastAPI dependency (``Depends``) giving an endpoint a transaction of ``engine``'s
    store, to write its own rows and enqueue jobs (``connection=``) atomically.

    It yields what ``engine.store.transaction()`` yields: the psycopg or asyncpg
    connection, the SQLAlchemy ``AsyncSession`` / ``Session`` of a SQLAlchemy store.
    The transaction commits when the endpoint returns, before the response is sent (the
    dependency's ``scope="function"``), so a client that got a success knows the rows
    and the jobs exist; an exception (``HTTPException`` included) rolls both back.
    ``statement_timeout`` (seconds) bounds each statement. Use it as
    ``conn = transaction(engine)`` in the endpoint's parameters, or in ``Annotated``.
    """
    from ._fastapi import transaction as dependency

    return dependency(engine, statement_timeout=statement_timeout)


def create_dashboard_router(
    engine: AsyncEngine | Engine,
    *,
    authorize: AsyncAuthorize | Authorize,
    prefix: str = "",
    **options: Unpack[DashboardOptions],
) -> APIRouter:
    """The web dashboard of ``engine`` as a FastAPI router (docs/dashboard.md).

    Deny by default: ``authorize`` is required (TypeError without it), the same hook as
    :func:`create_router`'s, asked for ``read`` on a page and ``write`` for the Retry and
    Discard buttons; the ``options`` (``refresh``, ``page_size``, ``window``,
    ``bucket``) are those of :class:`~skiplock.integrations.dashboard.AsyncDashboard`.
    With an ``AsyncEngine`` the hook may be a coroutine function; a sync ``Engine`` runs
    it and the pages in the thread pool. Mount it with
    ``mount(app, router, prefix="/admin/dashboard")`` (:func:`mount`); its routes stay
    out of the app's OpenAPI document.
    """
    # Imported here: the REST router and the transaction dependency need no Jinja2.
    from ._fastapi import router
    from .dashboard import AsyncDashboard, Dashboard

    routes = _routes(
        engine,
        lambda engine: AsyncDashboard(engine, authorize=authorize, **options).routes(),
        lambda engine: Dashboard(engine, authorize=authorize, **options).routes(),  # type: ignore[arg-type]
    )
    return router(routes, namespace="skiplock.dashboard.", door="dashboard", prefix=prefix)


def create_probes_router(
    engine: AsyncEngine | Engine, *, prefix: str = "", timeout: float | None = None
) -> APIRouter:
    """Liveness and readiness probes as a FastAPI router: ``GET <prefix>/livez`` answers
    200 while the app serves requests; ``GET <prefix>/readyz`` answers 200 if the
    engine's database answers a trivial query (the store's clock) within ``timeout``
    seconds (default: the engine's ``Settings.request_timeout``, 2 s), else 503. Bodies
    are ``ok`` / ``unavailable``: no version, host or error (why readiness failed is
    logged on ``skiplock.probes``).

    They bypass the admin authorization hook by design: a kubelet or load balancer
    calls them without credentials, and they reveal nothing. Mount with
    ``mount(app, create_probes_router(engine))`` (:func:`mount`); they stay out of the
    app's OpenAPI document.
    """
    from ._fastapi import router
    from ._monitor import probe_routes

    routes = probe_routes(engine, timeout=timeout)
    return router(routes, namespace="skiplock.", door="probes", prefix=prefix)


def create_metrics_router(
    engine: AsyncEngine | Engine,
    *,
    metrics: PrometheusMetrics | None = None,
    prefix: str = "",
    path: str = "/metrics",
) -> APIRouter:
    """The queue's Prometheus metrics as a FastAPI router: ``GET <prefix><path>`` answers
    a scrape in Prometheus' text format, whether or not a worker runs in this process.

    The scrape reads the engine's store (queue depths per kind and tenant, the oldest due
    job's age, running and dead jobs, registered workers, ``skiplock_up``,
    ``skiplock_healthy``; cached for the metrics' ``cache_seconds``) in a thread, so the
    event loop goes on. ``metrics`` (a
    :class:`~skiplock.contrib.prometheus.PrometheusMetrics`, e.g. the engine's own, so
    one endpoint serves the worker's counters too) is made to
    :meth:`~skiplock.contrib.prometheus.PrometheusMetrics.watch` the engine; default: one
    on a registry of its own. No authorization hook: the metrics name kinds and tenants,
    so mount it where only Prometheus reaches it, or guard it with the router's
    ``dependencies=``.
    """
    from ._fastapi import router
    from ._monitor import metrics_routes

    routes = metrics_routes(engine, metrics=metrics, path=path)
    return router(routes, namespace="skiplock.", door="metrics", prefix=prefix)


def _routes(
    engine: object,
    make_async: Callable[[AsyncEngine], Sequence[AsyncRoute]],
    make_sync: Callable[[Engine], Sequence[Route]],
) -> Sequence[AsyncRoute | Route]:
    """The routes of the door (REST API, dashboard) of ``engine``'s flavour."""
    if isinstance(engine, AsyncEngine):
        return make_async(engine)
    if isinstance(engine, Engine):
        return make_sync(engine)
    raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
