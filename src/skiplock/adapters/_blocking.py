"""An async store's methods as blocking calls: what lets sync code (the ``skiplock``
command's admin commands, the contract kit's state machine) drive an async-only store
such as asyncpg's.

Each call runs on the event loop that owns the store and the calling thread waits for
its result. :class:`LoopThread` gives such a loop to code that has none (it runs in a
daemon thread of its own).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from skiplock.ports import AsyncJobStore

T = TypeVar("T")

__all__ = ["BlockingStore", "LoopThread"]


class LoopThread:
    """An event loop running in a daemon thread until :meth:`close`."""

    def __init__(self, name: str = "skiplock-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop; block until it ends and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop, wait for its thread and close it. Idempotent."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BlockingStore:
    """The methods of ``store`` (an async job store) as blocking calls, each run on
    ``loop``, the loop that owns the store, from any other thread; other attributes
    (``schema``, properties) are the store's own.

    It quacks like a sync :class:`~skiplock.ports.JobStore` for what is a plain call
    (reads, admin changes, ``close``); ``transaction()`` and ``autocommit()`` stay async
    context managers, so enqueueing on a caller's connection needs a real sync store.
    """

    def __init__(self, store: AsyncJobStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        method: Callable[..., Coroutine[Any, Any, Any]] = attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop).result()

        return call

    def __repr__(self) -> str:
        return f"BlockingStore({self._store!r})"
