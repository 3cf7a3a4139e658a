"""The monitoring routes every web binding mounts (framework-neutral): liveness and
readiness probes, and the Prometheus exporter's scrape endpoint.

The probes need no authorization and reveal nothing: their bodies are ``ok`` or
``unavailable``, never a version, a host or an error (why a readiness check failed is
logged on ``skiplock.probes``). Liveness answers as long as the process serves requests;
readiness asks the store for its clock (``SELECT now()`` on PostgreSQL, a trivial query)
and answers 503 unless it answers within ``timeout`` seconds (default: the engine's
``Settings.request_timeout``, the deadline of every web request). The scrape endpoint serves a
:class:`~skiplock.contrib.prometheus.PrometheusMetrics` that watches the engine's store
(docs/metrics.md, "Metrics without a worker").
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, overload

from skiplock.core.rules import check_duration, to_duration
from skiplock.engine import AsyncEngine, Engine

from .rest import AsyncRoute, Response, Route
from .rest._routes import RouteSpec, spec_fields

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.contrib.prometheus import PrometheusMetrics
    from skiplock.ports import JobStore

    from .rest import Request

__all__ = ["LIVE_PATH", "PROBES", "READY_PATH", "metrics_routes", "probe_routes"]

LIVE_PATH = "/livez"
READY_PATH = "/readyz"
#: The probes' routes, static data (listed without an engine): liveness, then readiness.
PROBES = (
    RouteSpec(name="livez", method="GET", path=LIVE_PATH),
    RouteSpec(name="readyz", method="GET", path=READY_PATH),
)

logger = logging.getLogger("skiplock.probes")

_TEXT = "text/plain; charset=utf-8"
_NO_STORE = {"cache-control": "no-store"}
OK = Response(200, b"ok\n", _TEXT, _NO_STORE)
UNAVAILABLE = Response(503, b"unavailable\n", _TEXT, _NO_STORE)


def _timeout(engine: AsyncEngine | Engine, timeout: float | None) -> float:
    """``timeout`` (seconds) checked, or the engine's ``request_timeout`` (one source of
    truth for the probes, the REST API and the dashboard)."""
    if timeout is None:
        return engine.settings.request_timeout.total_seconds()
    return check_duration("timeout", to_duration(timeout)).total_seconds()


@overload
def probe_routes(engine: AsyncEngine, *, timeout: float | None = ...) -> list[AsyncRoute]: ...
@overload
def probe_routes(engine: Engine, *, timeout: float | None = ...) -> list[Route]: ...
@overload
def probe_routes(
    engine: AsyncEngine | Engine, *, timeout: float | None = ...
) -> list[AsyncRoute] | list[Route]: ...
def probe_routes(
    engine: AsyncEngine | Engine, *, timeout: float | None = None
) -> list[AsyncRoute] | list[Route]:
    """``GET /livez`` and ``GET /readyz`` for ``engine``'s flavour (see the module)."""
    if not isinstance(engine, AsyncEngine | Engine):
        raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
    seconds = _timeout(engine, timeout)
    live, ready = spec_fields(PROBES[0]), spec_fields(PROBES[1])
    if isinstance(engine, AsyncEngine):
        store = engine.store

        async def live_async(request: Request) -> Response:
            return OK

        async def ready_async(request: Request) -> Response:
            try:
                async with asyncio.timeout(seconds):
                    await store.now()
            except Exception as exc:
                logger.warning("readiness: the store did not answer (%s)", type(exc).__name__)
                return UNAVAILABLE
            return OK

        return [AsyncRoute(**live, answer=live_async), AsyncRoute(**ready, answer=ready_async)]
    if isinstance(engine, Engine):
        check = _SyncCheck(engine.store, seconds)
        return [
            Route(**live, answer=lambda request: OK),
            Route(**ready, answer=lambda request: OK if check() else UNAVAILABLE),
        ]
    raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")


class _SyncCheck:
    """The readiness check of a sync store: ``store.now()`` in a daemon thread, waited
    for ``timeout`` seconds. One check at a time: while one hangs (a database that does
    not answer), later probes wait for the same one, so hung threads never pile up."""

    def __init__(self, store: JobStore, timeout: float) -> None:
        self._store = store
        self._timeout = timeout
        self._lock = threading.Lock()
        self._running: _Attempt | None = None

    def __call__(self) -> bool:
        with self._lock:
            attempt = self._running
            if attempt is None or attempt.done.is_set():
                attempt = self._running = _Attempt(self._store.now)
        if not attempt.done.wait(self._timeout):
            logger.warning("readiness: the store did not answer within %g s", self._timeout)
            return False
        if attempt.error is not None:
            logger.warning("readiness: the store did not answer (%s)", attempt.error)
            return False
        return True


class _Attempt:
    """One call of ``call`` in a daemon thread."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.done = threading.Event()
        self.error: str | None = None
        self._call = call
        threading.Thread(target=self._run, name="skiplock-readiness", daemon=True).start()

    def _run(self) -> None:
        try:
            self._call()
        except Exception as exc:
            self.error = type(exc).__name__
        finally:
            self.done.set()


@overload
def metrics_routes(
    engine: AsyncEngine, *, metrics: PrometheusMetrics | None = ..., path: str = ...
) -> list[AsyncRoute]: ...
@overload
def metrics_routes(
    engine: Engine, *, metrics: PrometheusMetrics | None = ..., path: str = ...
) -> list[Route]: ...
@overload
def metrics_routes(
    engine: AsyncEngine | Engine, *, metrics: PrometheusMetrics | None = ..., path: str = ...
) -> list[AsyncRoute] | list[Route]: ...
def metrics_routes(
    engine: AsyncEngine | Engine,
    *,
    metrics: PrometheusMetrics | None = None,
    path: str = "/metrics",
) -> list[AsyncRoute] | list[Route]:
    """``GET <path>``: one scrape of ``metrics`` (default: a PrometheusMetrics on a
    registry of its own) watching ``engine``'s store. Needs prometheus-client."""
    from prometheus_client import CollectorRegistry

    from skiplock.contrib.prometheus import CONTENT_TYPE, PrometheusMetrics

    served = metrics if metrics is not None else PrometheusMetrics(registry=CollectorRegistry())
    if not isinstance(served, PrometheusMetrics):
        raise TypeError(
            f"metrics must be a skiplock.contrib.prometheus.PrometheusMetrics, got {served!r}"
        )

    def scrape() -> Response:
        return Response(200, served.exposition(), CONTENT_TYPE, _NO_STORE)

    if isinstance(engine, AsyncEngine):
        watched = False

        async def scrape_async(request: Request) -> Response:
            nonlocal watched
            if not watched:  # on the loop that owns the store: its reads run there
                served.watch(engine)
                watched = True
            # A scrape blocks while the loop reads the store: it runs in a thread.
            return await asyncio.to_thread(scrape)

        return [AsyncRoute(name="metrics", method="GET", path=path, answer=scrape_async)]
    if isinstance(engine, Engine):
        served.watch(engine)
        return [Route(name="metrics", method="GET", path=path, answer=lambda request: scrape())]
    raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
