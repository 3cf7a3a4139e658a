"""A worker in its host process (async source; ``_host.py`` is the sync twin).

:func:`serve_in_background` runs a worker in the background of a ``with`` block (what
:meth:`AsyncWorker.in_background` does for embedding, see docs/embedding.md);
:class:`StopSignals` turns SIGTERM/SIGINT into stops (what ``install_signal_handlers=True``
installs for the ``skiplock worker`` command).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import asynccontextmanager
from threading import Lock
from typing import TYPE_CHECKING, Protocol

from skiplock._compat_async import Task, ThreadSafeEvent, join, spawn

from .._logs import visible_logs

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

logger = logging.getLogger("skiplock.worker")


class Stoppable(Protocol):
    """What a host runs and stops: an :class:`AsyncWorker`."""

    @property
    def id(self) -> str:
        """The worker's id."""
        ...

    async def run(self) -> None:
        """Serve until stopped."""
        ...

    def stop(self, *, force: bool = False) -> None:
        """Stop serving (thread-safe)."""
        ...


@asynccontextmanager
async def serve_in_background(
    worker: Stoppable, serving: ThreadSafeEvent, began: Callable[[], bool]
) -> AsyncIterator[None]:
    """Run ``worker`` in the background while the block runs (as
    :meth:`AsyncWorker.in_background` describes); entering waits for ``serving``, which the
    worker sets once it serves or its run ended, and ``began()`` tells which. Where the
    host process configured no logging (uvicorn's default config), the worker's log lines
    go to stderr meanwhile (:func:`~.._logs.visible_logs`)."""
    with visible_logs():
        task = spawn(_run, worker)
        try:
            await serving.wait()
        except BaseException:
            await _leave(worker, task, force=True)
            raise
        # run() ended before it served (it could not start): raise why, or go on if it was
        # stopped before. A run that served and ended already (a processor's SystemExit
        # under a slow host) is the block's exit's business, as documented.
        if task.done() and not began():
            failure = await join(task)
            if failure is not None:
                raise failure
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            if error is None:
                failure = await _leave(worker, task, force=False)
                if failure is not None:
                    raise failure
            else:
                forced = isinstance(error, KeyboardInterrupt)
                if True:  # ASYNC
                    forced = forced or isinstance(error, asyncio.CancelledError)
                failure = await _leave(worker, task, force=forced)
                if failure is not None:
                    logger.error(
                        "worker %s failed while its block raised %s",
                        worker.id,
                        type(error).__name__,
                        exc_info=failure,
                    )


async def _run(worker: Stoppable) -> BaseException | None:
    """``worker.run()`` in the background, returning what it raised: raised in the host's
    code when the block ends (a SystemExit escaping a task would stop the host's event
    loop)."""
    try:
        await worker.run()
    except BaseException as exc:
        if True:  # ASYNC
            if isinstance(exc, asyncio.CancelledError):
                raise  # the host's own cancellation (see _leave)
        return exc
    return None


async def _leave(
    worker: Stoppable, task: Task[BaseException | None], *, force: bool
) -> BaseException | None:
    """Stop the worker :func:`serve_in_background` started and wait for it; returns what
    its ``run()`` raised, or None.

    Interrupted while waiting (a cancellation, which cancels ``run()`` too;
    ``KeyboardInterrupt``), it forces the stop, waits for the cleanup and raises the
    interruption.
    """
    worker.stop(force=force)
    try:
        return await join(task)
    except BaseException:
        worker.stop(force=True)
        if not task.done():
            await join(task)
        raise


class StopSignals:
    """The stop-signal handler of a worker serving in the foreground: the first signal
    stops it gracefully (running jobs get ``drain_timeout`` seconds to finish), the next
    one forces the stop (``install_signal_handlers`` abandons the cleanup on the third)."""

    def __init__(self, worker: Stoppable, *, drain_timeout: float) -> None:
        self._worker = worker
        self._drain_timeout = drain_timeout
        self._lock = Lock()
        self._received = 0

    def __call__(self, signum: int) -> None:
        with self._lock:
            self._received += 1
            again = self._received > 1
        name = signal.Signals(signum).name
        if again:
            logger.warning(
                "worker %s: %s received again: stopping now, running jobs are released "
                "(a third signal abandons the cleanup)",
                self._worker.id,
                name,
            )
        else:
            logger.info(
                "worker %s: %s received: claiming stopped, running jobs get up to %.1f s "
                "to finish (send it again to stop now)",
                self._worker.id,
                name,
                self._drain_timeout,
            )
        self._worker.stop(force=again)
