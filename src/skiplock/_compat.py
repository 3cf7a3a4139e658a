"""Concurrency primitives for the sync flavour (hand-written twin of ``_compat_async.py``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

P = ParamSpec("P")
T = TypeVar("T")

Lock = threading.Lock
Event = threading.Event


def skip_sync(fn: Callable[P, T]) -> Callable[P, T]:
    """Mark a function that has no sync twin (never called in generated code)."""
    return fn


def sleep(seconds: float) -> None:
    """Sleep the current thread."""
    time.sleep(seconds)


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` passes; True if it was set."""
    return event.wait(timeout)


class Task(Generic[T]):
    """A thread running one function, with its result or exception kept for ``join``."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._result = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in join()
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> T:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


def spawn(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Task[T]:
    """Run ``fn(*args)`` in a thread; ``join()`` waits for it."""
    return Task(fn, args, kwargs)


def join(task: Task[T]) -> T:
    """Wait for a spawned thread and return its result."""
    return task.join()


def gather(*results: T) -> list[T]:
    """Sync calls already ran in order; keep the shape of the async API."""
    return list(results)
