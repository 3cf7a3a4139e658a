"""Periodic maintenance: stale-claim recovery and retention (async source;
``_maintenance.py`` is the sync twin)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from skiplock.ports import AsyncUpkeepRole, AsyncWorkersRole

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.ports import AsyncAudit

    from .settings._settings import Settings

#: Succeeded jobs, and audit events, purged per batch by maintenance.
PURGE_BATCH = 1000


class AsyncMaintenanceStore(AsyncUpkeepRole, AsyncWorkersRole, Protocol):
    """The roles maintenance uses: upkeep (the maintenance lease, retention) and
    recovery (``recover_stale``, of the workers role)."""


class Maintenance:
    """Stale-claim recovery (R12) and retention (R26) for one engine.

    ``stale_ttls()`` gives the per-kind stale TTLs that differ from
    ``Settings.stale_ttl``. With ``audit``, jobs recovery moves to dead are audited
    (J10). Retention purges succeeded jobs older than ``Settings.retention`` and, on its
    own schedule slot, audit events older than ``Settings.audit_retention``.
    """

    def __init__(
        self,
        store: AsyncMaintenanceStore,
        settings: Settings,
        stale_ttls: Callable[[], dict[str, timedelta]],
        audit: AsyncAudit | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._stale_ttls = stale_ttls
        self._audit = audit

    async def run(self, *, once_per_period: bool = False) -> tuple[list[int], int]:
        """One run; returns the recovered job ids and the number of purged jobs (audit
        events purged are not counted).

        With ``once_per_period`` each task runs only if no node ran it within the last
        ``maintenance_interval`` (``store.try_maintenance``, J13), so a cluster does the
        work once per period however many workers it has.
        """
        settings = self._settings
        every = timedelta(seconds=settings.maintenance_interval)
        recovered: list[int] = []
        if not once_per_period or await self._store.try_maintenance("recover", every):
            ttls = self._stale_ttls()
            recovered = await self._store.recover_stale(
                default_ttl=settings.stale_ttl, ttls=ttls, audit=self._audit
            )
        purged = 0
        if settings.retention is not None and (
            not once_per_period or await self._store.try_maintenance("purge", every)
        ):
            purged = await self._store.purge(
                older_than=settings.retention,
                archive=settings.retention_archive,
                key_window=settings.idempotency_retention,
                batch_size=PURGE_BATCH,
            )
        if settings.audit_retention is not None and (
            not once_per_period or await self._store.try_maintenance("purge_audit", every)
        ):
            await self._store.purge_audit(
                older_than=settings.audit_retention, batch_size=PURGE_BATCH
            )
        return recovered, purged
