"""The start-up probe of ``worker`` (in every door): open the store, which connects and
checks the schema version, and fail fast with the cause on one line.

The worker itself retries store errors with backoff (a database restart must not stop a
running worker), so a worker that cannot start would otherwise retry forever. The probe
gives up at the first failed connection attempt, or after :data:`STARTUP_TIMEOUT`
without an answer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

from skiplock.core import SkiplockError

from ._errors import Failure
from ._output import describe, one_line

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from skiplock.ports import AsyncJobStore, JobStore

#: Seconds the worker command gives the store to connect and check the schema before it
#: gives up (more than the admin commands' default ``--timeout``, 2 s: it runs once).
STARTUP_TIMEOUT = 5.0
#: psycopg's pool connects in the background and logs why an attempt failed here.
POOL_LOGGER = "psycopg.pool"


class StartupError(Failure):
    """The store cannot be opened: one line, exit status 1."""


async def open_async(store: AsyncJobStore, *, debug: bool) -> None:
    """Open ``store`` (a store without ``open()`` needs none); StartupError if it fails."""
    opener = getattr(store, "open", None)
    if opener is None:
        return
    loop = asyncio.get_running_loop()
    failures = _PoolFailures()
    with _pool_failures(failures, show=debug):
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT) as deadline:

                def give_up() -> None:  # psycopg's async pool logs in tasks of this loop
                    if not deadline.expired():
                        deadline.reschedule(loop.time())

                failures.notify = give_up
                await opener()
        except (TimeoutError, SkiplockError) as exc:
            failures.listening = False
            await store.close()  # while the pool's retries are still muted
            raise _startup_error(exc, failures) from exc
        finally:
            failures.listening = False


def open_sync(store: JobStore, *, debug: bool) -> None:
    """The sync twin of :func:`open_async`: the blocking open runs in a daemon thread, so
    giving up on it does not wait for the store's own (longer) timeout."""
    opener = getattr(store, "open", None)
    if opener is None:
        return
    outcome: list[BaseException | None] = []
    settled = threading.Event()

    def run() -> None:
        try:
            opener()
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)
        else:
            outcome.append(None)
        settled.set()

    failures = _PoolFailures()
    failures.notify = settled.set
    with _pool_failures(failures, show=debug):
        threading.Thread(target=run, name="skiplock-startup-check", daemon=True).start()
        settled.wait(STARTUP_TIMEOUT)
        failures.listening = False
        error = outcome[0] if outcome else TimeoutError()
        if error is None:
            return
        store.close()  # while the pool's retries are still muted
    if not isinstance(error, TimeoutError | SkiplockError):
        raise error
    raise _startup_error(error, failures) from error


class _PoolFailures(logging.Handler):
    """Keeps the first failed connection attempt psycopg's pool reports while
    ``listening`` (it retries in the background, so the opener would only see a timeout)
    and calls ``notify``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.message: str | None = None
        self.notify: Callable[[], None] = lambda: None
        self.listening = True

    def emit(self, record: logging.LogRecord) -> None:
        # "error connecting in %r: %s" with the exception last: keep what the server or
        # the operating system said. Other warnings (e.g. about stopping) carry none, and
        # an attempt cancelled by closing the pool carries a CancelledError.
        last = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        if self.listening and self.message is None and isinstance(last, Exception):
            self.message = describe(last)
            self.notify()


@contextmanager
def _pool_failures(handler: _PoolFailures, *, show: bool) -> Iterator[None]:
    """Collect the pool's warnings in ``handler`` while the block runs; print them only
    if ``show`` (--log-level DEBUG)."""
    logger = logging.getLogger(POOL_LOGGER)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = show
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _startup_error(exc: BaseException, failures: _PoolFailures) -> StartupError:
    if failures.message is not None:
        return StartupError(f"cannot connect to PostgreSQL: {one_line(failures.message)}")
    if isinstance(exc, TimeoutError):
        return StartupError(f"no answer from PostgreSQL within {STARTUP_TIMEOUT:g} s")
    return StartupError(describe(exc))
