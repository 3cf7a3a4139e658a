"""Async test helpers (the sync twin ``helpers.py`` is generated)."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from skiplock._compat_async import sleep
from skiplock.adapters.memory import AsyncInMemoryJobStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence
    from datetime import datetime, timedelta

    from skiplock import AsyncWorker
    from skiplock.adapters.memory import InMemoryTransaction
    from skiplock.core import ClaimRequest, Completion, Lease
    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncAudit


class CountingStore(AsyncInMemoryJobStore):
    """The in-memory store, counting claims, claimed jobs, heartbeats, maintenance,
    connections handed out, and the sizes of ``complete`` calls made outside a
    transaction."""

    claims = 0
    claimed = 0
    #: Claims that took at least one job.
    takes = 0
    heartbeats = 0
    starts = 0
    recoveries = 0
    transactions = 0
    autocommits = 0
    first_request: ClaimRequest | None = None
    last_request: ClaimRequest | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.maintenance_tries: list[tuple[str, bool]] = []
        self.purges = 0
        self.statement_timeouts: list[tuple[str, float | None]] = []

    @asynccontextmanager
    async def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[InMemoryTransaction]:
        self.transactions += 1
        self.statement_timeouts.append(("transaction", statement_timeout))
        async with super().transaction(statement_timeout=statement_timeout) as tx:
            yield tx

    @asynccontextmanager
    async def autocommit(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[InMemoryTransaction]:
        self.autocommits += 1
        self.statement_timeouts.append(("autocommit", statement_timeout))
        async with super().autocommit(statement_timeout=statement_timeout) as handle:
            yield handle

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        if connection is None:
            self.batches.append(len(completions))
        return await super().complete(completions, connection=connection, audit=audit)

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        jobs = await super().claim(request, audit=audit)
        if self.first_request is None:
            self.first_request = request
        self.last_request = request
        self.claims += 1
        self.claimed += len(jobs)
        if jobs:
            self.takes += 1
        return jobs

    async def start(self, leases: Sequence[Lease]) -> list[bool]:
        self.starts += 1
        return await super().start(leases)

    async def heartbeat(
        self,
        worker_id: str,
        running: Sequence[int] = (),
        *,
        release_unheld: bool = False,
    ) -> list[int] | None:
        self.heartbeats += 1
        return await super().heartbeat(worker_id, running, release_unheld=release_unheld)

    async def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        self.recoveries += 1
        return await super().recover_stale(default_ttl=default_ttl, ttls=ttls, audit=audit)

    async def try_maintenance(self, name: str, every: timedelta) -> bool:
        granted = await super().try_maintenance(name, every)
        self.maintenance_tries.append((name, granted))
        return granted

    async def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        self.purges += 1
        return await super().purge(
            older_than=older_than, archive=archive, batch_size=batch_size, key_window=key_window
        )


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``predicate()`` holds (checked every few ms), failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await sleep(0.002)


def armed_for(worker: AsyncWorker, due_at: datetime) -> bool:
    """Whether ``worker``'s claim loop armed its next-due timer for ``due_at`` (the store's
    clock)."""
    wakeup = worker.next_wakeup
    return wakeup is not None and wakeup.due_at == due_at
