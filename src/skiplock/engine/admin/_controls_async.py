"""Run-time controls of an engine (issue 30) (async source; ``_controls.py`` is the sync
twin): pause and resume kinds, tenants and (kind, tenant) pairs, and set rate limits and
provider caps, stored for every worker of the cluster (docs/controls.md, "Tenants,
limits and pause")."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

from skiplock.core import RateLimit
from skiplock.core.rules import (
    check_bool,
    check_concurrency_limit,
    check_reason,
    check_worker_id,
    concurrency_scope,
    limit_scope,
    pause_scope,
)
from skiplock.core.store import ConcurrencyLimit, Limit, Pause, WorkerRequest
from skiplock.ports import AsyncControlsRole

from ._admin_async import AsyncAdminOps, AsyncAdminStore

if TYPE_CHECKING:
    from .._controls import ControlsCache


logger = logging.getLogger("skiplock.engine")


class KindCheck(Protocol):
    """Enqueue's rule for kinds, as the controls use it (the engine's intake provides it;
    the admin layer does not import the enqueue package)."""

    def known_kinds(self) -> frozenset[str]:
        """The kinds the engine knows."""
        ...

    def check_named_kind(self, kind: str, known: frozenset[str], what: str) -> None:
        """Refuse, warn about or accept ``kind`` named by a pause or limit (``what``)."""
        ...


class AsyncControlStore(AsyncAdminStore, AsyncControlsRole, Protocol):
    """The roles the admin API with controls uses: reads, admin changes and controls."""


class AsyncControlOps(AsyncAdminOps):
    """The admin API with pauses and limits, mixed into :class:`AsyncEngine` and the
    operator handle (they provide ``_controls`` too: the engine's snapshot its workers
    claim by, None for a handle without one).

    Every change is stored at once and reaches every worker within
    ``Settings.controls_refresh`` (default 1 s). A change names the handle's actor (the
    operator's, or the engine's ``Settings.audit_actor``); with the audit trail on
    (J10) it records an event without a job (``paused``, ``resumed``, ``limit_set``,
    ``limit_cleared``).

    Concurrency limits (issue 45) are set and cleared the same way
    (:meth:`set_concurrency`, ``concurrency_set`` and ``concurrency_cleared`` events).

    A pause or limit of a kind this engine does not know is refused as enqueue refuses
    it (``Settings.unknown_kinds``; :class:`~skiplock.UnknownKindError` naming the known
    kinds): a typo would otherwise be stored and never apply. ``allow_unknown_kind=True``
    accepts a kind another service declares. An engine that knows no kind (the bare
    ``skiplock --dsn`` command's) checks against the kinds its database knows: those its
    registered workers claim and those with jobs; none known: any kind.
    """

    _store: AsyncControlStore
    _controls: ControlsCache | None = None
    #: The engine's intake (enqueue's kind rule), set by the engine and the handle.
    _kind_check: KindCheck

    def _actor_of_changes(self) -> str | None:
        """Who this handle's changes are made by (stored on a pause or limit)."""
        return self._settings.audit_actor

    async def _changed(self) -> None:
        # This engine's own workers claim by the change at once (a pause applies to their
        # next claim; their refresh loop wakes them for a resume); other processes' read
        # it within controls_refresh.
        cache = self._controls
        if cache is not None:
            cache.invalidate()
            try:
                cache.update(await self._store.controls(), time.monotonic())
            except Exception:  # the workers' own refresh reads it then
                logger.debug("reading the controls after a change failed", exc_info=True)

    async def _check_kind(self, kind: str | None, allow_unknown_kind: object, what: str) -> None:
        """Refuse a ``what`` (pause, limit) of a kind nobody declared, unless
        ``allow_unknown_kind`` (see the class)."""
        if check_bool("allow_unknown_kind", allow_unknown_kind) or kind is None:
            return
        known = self._kind_check.known_kinds()
        if not known and self._settings.unknown_kinds != "allow":
            snapshot = await self._store.health_snapshot()
            found = {stats.kind for stats in snapshot.queues}
            for worker in snapshot.workers:
                found |= worker.kinds or frozenset()
            known = frozenset(found)
        self._kind_check.check_named_kind(kind, known, what)

    async def pause(
        self,
        *,
        kind: str | None = None,
        tenant: str | None = None,
        reason: str | None = None,
        allow_unknown_kind: bool = False,
    ) -> Pause:
        """Stop claiming the jobs of ``kind`` (None: every kind) of ``tenant`` (None:
        every tenant); at least one of them. Jobs stay pending with their attempts and
        their place; running jobs finish. Pausing again keeps ``since`` and takes the new
        ``reason``. Returns the pause as stored. A kind this engine does not know raises
        :class:`~skiplock.UnknownKindError` unless ``allow_unknown_kind``."""
        kind, tenant = pause_scope(kind, tenant)
        reason = check_reason(reason)
        await self._check_kind(kind, allow_unknown_kind, "pause")
        pause = Pause(kind=kind, tenant=tenant, reason=reason, actor=self._actor_of_changes())
        stored = await self._store.pause(pause, audit=self._audit)
        await self._changed()
        return stored

    async def resume(self, *, kind: str | None = None, tenant: str | None = None) -> Pause | None:
        """Lift the pause of exactly ``kind`` and ``tenant`` as :meth:`pause` set it (a
        kind-wide pause is lifted with the kind alone); returns it, None if there was
        none. Jobs of the kind still covered by another pause stay paused."""
        kind, tenant = pause_scope(kind, tenant)
        lifted = await self._store.resume(kind, tenant, audit=self._audit)
        await self._changed()
        return lifted

    async def set_limit(
        self,
        *,
        kind: str | None = None,
        tenant: str | None = None,
        provider: str | None = None,
        rps: float,
        burst: int,
        allow_unknown_kind: bool = False,
    ) -> Limit:
        """Set a rate limit (``rps`` tokens per second, ``burst`` at most stored): of
        ``kind`` for ``tenant``, or the kind's default for every tenant without its own
        (``tenant`` None); or a provider's cap across its kinds (``provider`` alone).
        It wins over the kind's ``rate_limit`` policy and ``Settings.caps``; replaces the
        limit set before. Returns it as stored. A kind this engine does not know raises
        :class:`~skiplock.UnknownKindError` unless ``allow_unknown_kind``."""
        kind, tenant, provider = limit_scope(kind, tenant, provider)
        rate = RateLimit(rps=rps, burst=burst)
        await self._check_kind(kind, allow_unknown_kind, "limit")
        who = self._actor_of_changes()
        limit = Limit(limit=rate, kind=kind, tenant=tenant, provider=provider, actor=who)
        stored = await self._store.set_limit(limit, audit=self._audit)
        await self._changed()
        return stored

    async def clear_limit(
        self,
        *,
        kind: str | None = None,
        tenant: str | None = None,
        provider: str | None = None,
    ) -> Limit | None:
        """Remove the limit :meth:`set_limit` set for exactly these arguments; the
        kind's policy (or the next stored level) applies again. Returns it, None if
        there was none."""
        kind, tenant, provider = limit_scope(kind, tenant, provider)
        cleared = await self._store.clear_limit(kind, tenant, provider, audit=self._audit)
        await self._changed()
        return cleared

    async def set_concurrency(
        self,
        *,
        kind: str | None = None,
        key: str | None = None,
        limit: int,
        scope: str = "cluster",
        allow_unknown_kind: bool = False,
    ) -> ConcurrencyLimit:
        """Set a concurrency limit at run time (issue 45): at most ``limit`` jobs of
        ``kind`` run at once per worker process (``scope="node"``, over the kind's
        ``node_limit``) or across the cluster (``"cluster"``, over its
        ``cluster_limit``); or at most ``limit`` jobs of concurrency ``key`` (cluster-wide,
        over the jobs' ``concurrency_limit``). Replaces the one set before; every worker
        claims by it within ``Settings.controls_refresh``. Returns it as stored. A kind
        this engine does not know raises :class:`~skiplock.UnknownKindError` unless
        ``allow_unknown_kind``."""
        kind, key, checked_scope = concurrency_scope(kind, key, scope)
        limit = check_concurrency_limit(limit)
        await self._check_kind(kind, allow_unknown_kind, "concurrency limit")
        wanted = ConcurrencyLimit(
            limit, kind=kind, key=key, scope=checked_scope, actor=self._actor_of_changes()
        )
        stored = await self._store.set_concurrency(wanted, audit=self._audit)
        await self._changed()
        return stored

    async def clear_concurrency(
        self, *, kind: str | None = None, key: str | None = None, scope: str = "cluster"
    ) -> ConcurrencyLimit | None:
        """Remove the concurrency limit :meth:`set_concurrency` set for exactly these
        arguments: the declared limit (none if none is declared) applies again. Returns
        it, None if there was none."""
        kind, key, checked_scope = concurrency_scope(kind, key, scope)
        cleared = await self._store.clear_concurrency(kind, key, checked_scope, audit=self._audit)
        await self._changed()
        return cleared

    async def drain_worker(self, worker_id: str) -> WorkerRequest | None:
        """Ask worker ``worker_id`` (on any host) to drain (issue 45): it stops claiming,
        gives its held jobs back, lets every running job finish however long it takes,
        then unregisters and exits. It reads the request within
        ``Settings.controls_refresh``. Returns the request as stored, None if no such
        worker is registered. Audited (``worker_drain``)."""
        return await self._request_worker(worker_id, "drain")

    async def stop_worker(self, worker_id: str) -> WorkerRequest | None:
        """Ask worker ``worker_id`` to stop (issue 45): its graceful stop, as on SIGTERM
        (running jobs get ``shutdown_timeout``, then are interrupted and released
        without using an attempt). As :meth:`drain_worker` otherwise (``worker_stop``)."""
        return await self._request_worker(worker_id, "stop")

    async def _request_worker(self, worker_id: str, action: str) -> WorkerRequest | None:
        worker_id = check_worker_id(worker_id)
        actor = self._actor_of_changes()
        stored = await self._store.request_worker(worker_id, action, actor=actor, audit=self._audit)
        await self._changed()
        return stored
