"""The dashboard's shared read cache (async source; ``_cache.py`` is the sync twin).

The overview, the lists and the controls page read the same few summaries (the counts, the
health report, the throughput chart) on every visit, and many visitors read the same list
pages (the first page of the dead letters, of the job browser). With a burst of dead rows
between two autovacuum runs each of those reads costs many times its usual (issue 45, point
6; docs/performance.md, "Dead rows"), and fifty browsers refreshing at once would each pay
it. :class:`AsyncReadCache` keeps each summary for ``seconds`` and shares it between every
visitor of one dashboard:

- fresh (younger than ``seconds``): served as it is;
- stale but younger than :data:`STALE_LIMIT` times ``seconds``: served as it is while one
  visitor's background refresh reads it again (the others never wait for the database);
- missing or older: the visitor reads it, and concurrent visitors wait for that one read
  (one database read, not fifty).

Values nest: a rendered page is cached over the summaries and list pages it read, each
cached too. A read made for the cache (a visitor's or a refresh's) takes no stale value:
it reads that one again, and a fresh one it takes dates it (a page is as old as the oldest
value it shows). So no visitor is served data older than :data:`STALE_LIMIT` times
``seconds`` (and the time of a read), through every layer.

A failed refresh keeps the stale value until it is too old; then the next visitor reads
(and sees the error). A write through the dashboard (a button) clears the cache (a read
still running then is not kept), so the
page it redirects to shows the change. At most :data:`MAX_ENTRIES` values are kept (the
least recently read go first): list pages are many (one per filter and cursor).
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from skiplock._compat import no_deadline, request_deadline
from skiplock._compat_async import Lock, Task, held, spawn
from skiplock.core import DatabaseUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class AsyncRead(Protocol[T_co]):
    """A read the cache may call (a bound method of the operator, a closure)."""

    async def __call__(self) -> T_co: ...


#: A stale value is served (while one refresh runs) up to this many ``seconds`` old.
STALE_LIMIT = 3
#: The most values kept; the least recently read go first.
MAX_ENTRIES = 256

logger = logging.getLogger("skiplock.dashboard")

#: While a value is read for the cache: the time its data dates from so far (the oldest
#: cached value read within it lowers it).
_building: ContextVar[list[float] | None] = ContextVar("skiplock_cache_building", default=None)


def _dated(hit: tuple[float, Any], building: list[float] | None) -> Any:
    """A cached value served, within the read of another (``building``): that one's data
    is no newer than this value's."""
    if building is not None and hit[0] < building[0]:
        building[0] = hit[0]
    return hit[1]


class AsyncReadCache:
    """Summaries shared by a dashboard's visitors for ``seconds`` (0: no cache, every
    visit reads). ``clock``: monotonic seconds (tests pass their own). ``deadline``: the
    seconds a background refresh may take (a web request's ``request_timeout``; None: no
    limit but the store's own)."""

    def __init__(
        self,
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        deadline: float | None = None,
    ) -> None:
        self._seconds = seconds
        self._clock = clock
        self._deadline = deadline
        self._values: dict[Hashable, tuple[float, Any]] = {}
        self._locks: dict[Hashable, Lock] = {}
        #: The last background refresh of each key (one runs at most per key); kept, so
        #: a running task is referenced.
        self._refreshes: dict[Hashable, Task[None]] = {}
        #: One more at each clear(): a read that started before it is not kept.
        self._generation = 0

    def clear(self) -> None:
        """Forget every value (after a write: the next visit reads again), and any read
        still running: a refresh started before it would keep the page from before."""
        self._values.clear()
        self._generation += 1

    async def get(self, key: Hashable, read: AsyncRead[T]) -> T:
        """The value of ``key``: cached, or from ``read()`` (see the module)."""
        if self._seconds <= 0:
            return await read()
        # Within the read of another value (a page's, over the summaries): a stale value
        # is read again, and a fresh one dates that value (see _read).
        building = _building.get()
        hit = self._values.get(key)
        if hit is not None:
            self._values[key] = self._values.pop(key)  # the most recently read
            age = self._clock() - hit[0]
            if age < self._seconds:
                return _dated(hit, building)  # type: ignore[no-any-return]
            if building is None and age < self._seconds * STALE_LIMIT:
                last = self._refreshes.get(key)
                if last is None or last.done():
                    self._refreshes[key] = spawn(self._refresh, key, read)
                return hit[1]  # type: ignore[no-any-return]
        async with held(self._locks.setdefault(key, Lock())):
            hit = self._values.get(key)  # another visitor's read, done while this one waited
            if hit is not None and self._clock() - hit[0] < self._seconds:
                return _dated(hit, building)  # type: ignore[no-any-return]
            hit = await self._read(key, read)
            return _dated(hit, building)  # type: ignore[no-any-return]

    async def _read(self, key: Hashable, read: AsyncRead[Any]) -> tuple[float, Any]:
        """``read()``, kept with the time its data dates from: when it started, or the
        time of the oldest cached value it read (a page keeps the age of the summaries
        it shows, so the bound of the module holds through every layer)."""
        since, generation = [self._clock()], self._generation
        token = _building.set(since)
        try:
            value = await read()
        finally:
            _building.reset(token)
        if generation == self._generation:  # else cleared meanwhile: served, not kept
            self._keep(key, since[0], value)
        return since[0], value

    def _keep(self, key: Hashable, since: float, value: Any) -> None:
        """Keep ``value`` (its data of ``since``) as the newest of ``key``; forget the
        least recently read ones past :data:`MAX_ENTRIES`."""
        self._values.pop(key, None)
        self._values[key] = (since, value)
        while len(self._values) > MAX_ENTRIES:
            old = next(iter(self._values))
            del self._values[old]
            lock = self._locks.get(old)
            if lock is not None and not lock.locked():
                del self._locks[old]
            refresh = self._refreshes.get(old)
            if refresh is not None and refresh.done():
                del self._refreshes[old]

    async def _refresh(self, key: Hashable, read: AsyncRead[Any]) -> None:
        # A deadline of its own, not the one of the visit that started it (the task
        # inherits that visit's, which may be about to pass).
        with no_deadline():
            if self._deadline is None:
                await self._read_again(key, read)
            else:
                with request_deadline(self._deadline):
                    await self._read_again(key, read)

    async def _read_again(self, key: Hashable, read: AsyncRead[Any]) -> None:
        try:
            await self._read(key, read)
        except DatabaseUnavailableError as exc:
            # The stale value stays until it is too old; then a visitor reads (and fails).
            logger.warning("skiplock: refreshing the dashboard's %s failed: %s", key, exc)
        except Exception:
            logger.warning("skiplock: refreshing the dashboard's %s failed", key, exc_info=True)
