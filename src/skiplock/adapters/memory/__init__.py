"""In-memory job stores for unit tests and demos (no database).

``InMemoryJobStore`` (sync) and ``AsyncInMemoryJobStore`` pass the same contract suite as
the PostgreSQL adapters. Pass a :class:`skiplock.testing.FakeClock` as ``clock`` to control
due times.
"""

from __future__ import annotations

from ._state import InMemoryTransaction, MemoryState
from ._store import InMemoryJobStore, InMemoryNotifier
from ._store_async import AsyncInMemoryJobStore, AsyncInMemoryNotifier

__all__ = [
    "AsyncInMemoryJobStore",
    "AsyncInMemoryNotifier",
    "InMemoryJobStore",
    "InMemoryNotifier",
    "InMemoryTransaction",
    "MemoryState",
]
