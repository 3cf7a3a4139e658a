"""The store and notifier ports (async source; the sync twin is generated).

One call is one transaction or one clearly bounded operation. Ports speak core types
only. The caller's transaction enters as ``connection=``: whatever the adapter's
``transaction()`` yields, or the adapter's native connection/session type (R0). Without
it the store uses its own connection and commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime, timedelta

    from skiplock.core import (
        ClaimRequest,
        Completion,
        EnqueueRequest,
        EnqueueResult,
        Event,
        Job,
        JobFilter,
        Page,
        StateCount,
        WorkerInfo,
    )


class AsyncNotifier(Protocol):
    """Wakes an idle worker when jobs may have become claimable (LISTEN/NOTIFY)."""

    async def start(self) -> None:
        """Begin listening. Idempotent."""

    async def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a wakeup arrived (or was pending)."""
        ...

    async def close(self) -> None:
        """Stop listening and release resources."""


class AsyncJobStore(Protocol):
    """Where jobs live. Implementations: memory, psycopg, asyncpg, SQLAlchemy, yours.

    Every method that changes a job's state after its claim is *fenced* by the job's
    :class:`~skiplock.core.Lease`; a mismatch changes nothing.
    """

    async def now(self) -> datetime:
        """The store's clock (the database's ``now()``); all due times are on it."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """Open a transaction; yields a handle accepted as ``connection=``.

        Commits on normal exit, rolls back on exception. This is the job's transaction
        given to processors as ``ctx.connection`` (R10).
        """
        ...

    def autocommit(self) -> AbstractAsyncContextManager[Any]:
        """A connection outside any transaction, for kinds that cannot run in one."""
        ...

    async def enqueue(
        self, requests: Sequence[EnqueueRequest], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Create jobs (already validated), all or none; results in request order.

        An idempotency key that exists (also one created concurrently, or earlier in the
        same batch) creates nothing and returns the existing job's id, ``created=False``.
        """
        ...

    async def claim(self, request: ClaimRequest) -> list[Job]:
        """Atomically move due pending jobs to running for ``request.worker_id``.

        Order: priority DESC, available_at ASC, id ASC. Each job is claimed by exactly one
        caller; attempts += 1 at claim. Honours every limit in the request.
        """
        ...

    async def complete(
        self, completions: Sequence[Completion], *, connection: Any = None
    ) -> list[bool]:
        """Record outcomes, each fenced by its lease; True where it was applied."""
        ...

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """One job, or None."""
        ...

    async def list_jobs(self, filter: JobFilter, page: Page) -> list[Job]:
        """Jobs matching ``filter`` ordered by id (keyset page)."""
        ...

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant), zero counts omitted."""
        ...

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
    ) -> list[int]:
        """Operator transition (CANCEL, MARK_FAILED, REPLAY) of every matching job whose
        state allows ``event`` (``skiplock.core.sources``); returns the changed ids.

        REPLAY makes the job due now, clears the claim, and with ``reset_attempts`` sets
        attempts to 0. Wakes workers.
        """
        ...

    async def delete(self, filter: JobFilter, *, connection: Any = None) -> list[Job]:
        """Delete matching jobs that are not running; returns what was deleted."""
        ...

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh a worker row (heartbeat = now)."""

    async def heartbeat(self, worker_id: str) -> None:
        """Refresh the worker's heartbeat to the store's now."""

    async def unregister_worker(self, worker_id: str) -> None:
        """Remove the worker row (clean shutdown)."""

    async def recover_stale(
        self, *, default_ttl: timedelta, ttls: Mapping[str, timedelta]
    ) -> list[int]:
        """Running jobs whose worker's heartbeat is older than the kind's TTL (or whose
        worker row is gone) go back to pending, attempts unchanged, claim cleared and
        ``[stale-claim recovered]`` in last_error; those with no attempt left go to dead.
        Runs on one node at a time; returns the recovered ids."""
        ...

    async def purge(self, *, older_than: timedelta, archive: bool, batch_size: int) -> int:
        """Delete (or archive) succeeded jobs completed more than ``older_than`` ago."""
        ...

    def notifier(self) -> AsyncNotifier | None:
        """A notifier woken by this store's writes, or None (the worker polls)."""
        ...

    async def close(self) -> None:
        """Release pools and connections."""
