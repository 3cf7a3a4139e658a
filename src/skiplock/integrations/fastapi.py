"""FastAPI (and any Starlette app): run a skiplock worker for the lifetime of the app.

``worker_lifespan(engine, concurrency=4)`` is a lifespan: pass it as
``FastAPI(lifespan=...)``, or enter it inside your own lifespan. It needs neither FastAPI
nor Starlette to import: a lifespan is just a callable taking the app and returning an
async context manager (Starlette's lifespan protocol). See docs/embedding.md.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from skiplock.engine import AsyncEngine, AsyncWorker, Engine, Worker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable
    from contextlib import AbstractAsyncContextManager

__all__ = ["WorkerLifespan", "worker_lifespan"]


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

    def __init__(
        self,
        engine: AsyncEngine | Engine,
        *,
        concurrency: int | None = None,
        kinds: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        all_kinds: bool = False,
        worker_id: str | None = None,
    ) -> None:
        if not isinstance(engine, AsyncEngine | Engine):
            raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
        self._engine = engine
        self._kinds = None if kinds is None else frozenset(kinds)
        self._tenants = None if tenants is None else frozenset(tenants)
        self._concurrency = concurrency
        self._all_kinds = all_kinds
        self._worker_id = worker_id
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
        worker = self._engine.worker(
            concurrency=self._concurrency,
            kinds=self._kinds,
            tenants=self._tenants,
            all_kinds=self._all_kinds,
            worker_id=self._worker_id,
        )
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
    engine: AsyncEngine | Engine,
    *,
    concurrency: int | None = None,
    kinds: Iterable[str] | None = None,
    tenants: Iterable[str] | None = None,
    all_kinds: bool = False,
    worker_id: str | None = None,
) -> WorkerLifespan:
    """A lifespan that runs a worker of ``engine`` while the app runs (see
    :class:`WorkerLifespan`); the options are those of ``engine.worker()``.

    ``FastAPI(lifespan=worker_lifespan(engine, concurrency=4))``, or inside your own
    lifespan: ``async with worker_lifespan(engine)(app): yield``.
    """
    return WorkerLifespan(
        engine,
        concurrency=concurrency,
        kinds=kinds,
        tenants=tenants,
        all_kinds=all_kinds,
        worker_id=worker_id,
    )
