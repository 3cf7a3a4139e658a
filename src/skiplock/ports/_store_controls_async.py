"""The store port's controls role (async source; the sync twin is generated): pauses and
rate limits set at run time (issue 30), concurrency limits and requests to workers
(issue 45). The other roles, every role at once (``AsyncJobStore``) and the conventions
of the port (``audit=``) are in :mod:`._store_async`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from skiplock.core.store import ConcurrencyLimit, Controls, Limit, Pause, WorkerRequest

    from ._audit_async import AsyncAudit


class AsyncControlsRole(Protocol):
    """Controls: pauses and limits set at run time (issue 30) and concurrency limits
    (issue 45), read and changed."""

    async def controls(self) -> Controls:
        """Every pause and every limit set at run time (issue 30), read in one operation:
        workers call it every ``Settings.controls_refresh``. Pauses and limits come in a
        stable order (the store's)."""
        ...

    async def pause(self, pause: Pause, *, audit: AsyncAudit | None = None) -> Pause:
        """Pause ``(pause.kind, pause.tenant)`` (None: any), naming ``pause.actor`` and
        ``pause.reason``; returns it as stored (``since``: the store's time it was first
        paused; pausing again keeps it and takes the new reason and actor). Jobs it
        covers are not claimed while it stands (the worker leaves them out of its claims).
        Audit: ``paused`` (no job; details: the reason)."""
        ...

    async def resume(
        self, kind: str | None, tenant: str | None, *, audit: AsyncAudit | None = None
    ) -> Pause | None:
        """Lift the pause of exactly ``(kind, tenant)`` (None: any); returns it, or None
        if there was none (nothing changed). Audit: ``resumed`` with ``audit.actor`` (the
        lifted pause's reason in the details)."""
        ...

    async def set_limit(self, limit: Limit, *, audit: AsyncAudit | None = None) -> Limit:
        """Set the limit of ``(limit.kind, limit.tenant)`` or of ``limit.provider``,
        replacing the one there was; returns it as stored (``updated_at``: the store's
        time). Audit: ``limit_set`` (no job; details: provider, rps, burst)."""
        ...

    async def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        *,
        audit: AsyncAudit | None = None,
    ) -> Limit | None:
        """Remove the limit of exactly ``(kind, tenant)`` or of ``provider``; returns it,
        or None if there was none. Audit: ``limit_cleared`` with ``audit.actor``."""
        ...

    async def set_concurrency(
        self, limit: ConcurrencyLimit, *, audit: AsyncAudit | None = None
    ) -> ConcurrencyLimit:
        """Set the concurrency limit of ``(limit.kind, limit.key, limit.scope)`` (issue
        45), replacing the one there was; returns it as stored (``updated_at``: the
        store's time). A kind's limit reaches the claim through the workers (they read
        :meth:`controls`: ``ClaimRequest.cluster_limits``, their node slots); a key's
        limit the claim applies itself: a running job of the key counts against the
        stored limit instead of the jobs' ``concurrency_limit``. Audit:
        ``concurrency_set`` (no job; details: key, scope, limit)."""
        ...

    async def clear_concurrency(
        self,
        kind: str | None,
        key: str | None,
        scope: str,
        *,
        audit: AsyncAudit | None = None,
    ) -> ConcurrencyLimit | None:
        """Remove the concurrency limit of exactly ``(kind, key, scope)``: the declared
        limit applies again. Returns it, or None if there was none. Audit:
        ``concurrency_cleared`` with ``audit.actor``."""
        ...

    async def request_worker(
        self,
        worker_id: str,
        action: str,
        *,
        actor: str | None = None,
        audit: AsyncAudit | None = None,
    ) -> WorkerRequest | None:
        """Ask the registered worker ``worker_id`` to ``action`` (``drain`` or ``stop``,
        issue 45), naming ``actor``; returns the request as stored (``requested_at``: the
        store's time), None if there is no such worker row (nothing changed). A later
        request replaces it; it goes with the row (unregistering, recovery). The worker
        reads it from :meth:`controls` (``Controls.requests``); :meth:`health_snapshot`
        shows it on the worker. Audit: ``worker_drain`` or ``worker_stop`` (no job;
        details: the worker's id)."""
        ...
