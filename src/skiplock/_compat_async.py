"""Concurrency primitives for the async flavour (hand-written twin of ``_compat.py``).

Generated sync code imports the same names from ``skiplock._compat``; keep both files'
names and signatures identical.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

P = ParamSpec("P")
T = TypeVar("T")

Lock = asyncio.Lock
Event = asyncio.Event
Task = asyncio.Task


def skip_sync(fn: Callable[P, T]) -> Callable[P, T]:
    """Mark a function that has no sync twin (dropped by tools/unasync.py)."""
    return fn


async def sleep(seconds: float) -> None:
    """Sleep without blocking other tasks."""
    await asyncio.sleep(seconds)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` passes; True if it was set."""
    if timeout is None:
        await event.wait()
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return event.is_set()
    return True


def spawn(fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs) -> Task[T]:
    """Run ``fn(*args)`` concurrently; ``join()`` waits for it."""
    return asyncio.get_running_loop().create_task(fn(*args, **kwargs))


async def join(task: Task[T]) -> T:
    """Wait for a spawned task and return its result."""
    return await task


async def gather(*aws: Awaitable[T]) -> list[T]:
    """Wait for all, in order."""
    return list(await asyncio.gather(*aws))
