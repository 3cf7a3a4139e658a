"""The memory state's ``ControlsRole`` (:mod:`skiplock.ports`): pauses and limits set at
run time (issue 30). Tested by the kit's ``AsyncControlsContract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from skiplock.core import AuditAction
from skiplock.core.store import (
    ConcurrencyLimit,
    Controls,
    Limit,
    Pause,
    WorkerRequest,
    control_event,
    outlived_buckets,
    worker_request_event,
)

from ._base import AuditNote, StateBase

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

#: A limit stored with its time: a rate limit or a concurrency limit.
L = TypeVar("L", Limit, ConcurrencyLimit)


class ControlsState(StateBase):
    """Pauses and limits, in the order they were first set."""

    def controls(self) -> Controls:
        """Every pause and limit, in the order they were first set."""
        with self._lock:
            pauses, limits = tuple(self._pauses.values()), tuple(self._limits.values())
            concurrency = tuple(self._concurrency.values())
            requests = tuple(
                row.request for _, row in sorted(self._workers.items()) if row.request is not None
            )
        return Controls(pauses, limits, concurrency, requests)

    def request_worker(
        self, worker_id: str, action: str, actor: str | None, note: AuditNote | None = None
    ) -> WorkerRequest | None:
        """Ask worker ``worker_id`` to ``action``; the request, None without such a worker."""
        with self._lock:
            row = self._workers.get(worker_id)
            if row is None:
                return None
            now = self.now()
            row.request = WorkerRequest(worker_id, action, actor, now)  # type: ignore[arg-type]
            if note is not None:
                event = worker_request_event(row.request, now)
                (self._audit if note.table else note.events).append(event)
            return row.request

    def pause(self, pause: Pause, note: AuditNote | None = None) -> Pause:
        """Set the pause (pausing again keeps the first ``since``); audited as ``note``
        says."""
        with self._lock:
            now = self.now()
            key = (pause.kind, pause.tenant)
            before = self._pauses.get(key)
            stored = attrs.evolve(pause, since=now if before is None else before.since)
            self._pauses[key] = stored
            self._control_audit(note, AuditAction.PAUSED, stored, now)
        return stored

    def resume(
        self, kind: str | None, tenant: str | None, note: AuditNote | None = None
    ) -> Pause | None:
        """Lift the pause of exactly ``(kind, tenant)``; the pause lifted, or None."""
        with self._lock:
            lifted = self._pauses.pop((kind, tenant), None)
            if lifted is not None:
                self._control_audit(note, AuditAction.RESUMED, lifted, self.now())
        return lifted

    def set_limit(self, limit: Limit, note: AuditNote | None = None) -> Limit:
        """Set the limit, replacing the one there was; audited as ``note`` says."""
        key = (limit.kind, limit.tenant, limit.provider)
        return self._set(self._limits, key, limit, AuditAction.LIMIT_SET, note)

    def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        note: AuditNote | None = None,
    ) -> Limit | None:
        """Remove the limit of exactly ``(kind, tenant)`` or ``provider``; it, or None.
        The buckets counted under it go with it (:func:`outlived_buckets`)."""
        key = (kind, tenant, provider)
        return self._clear(self._limits, key, AuditAction.LIMIT_CLEARED, note, self._drop_buckets)

    def _drop_buckets(self, cleared: Limit) -> None:
        # Under the lock, with the limit removed.
        pairs, providers = outlived_buckets(
            cleared, self._limits.values(), self._pair_buckets, self._provider_buckets
        )
        for pair in pairs:
            del self._pair_buckets[pair]
        for name in providers:
            del self._provider_buckets[name]

    def set_concurrency(
        self, limit: ConcurrencyLimit, note: AuditNote | None = None
    ) -> ConcurrencyLimit:
        """Set the concurrency limit, replacing the one there was; audited as ``note``
        says."""
        key = (limit.kind, limit.key, limit.scope)
        return self._set(self._concurrency, key, limit, AuditAction.CONCURRENCY_SET, note)

    def clear_concurrency(
        self, kind: str | None, key: str | None, scope: str, note: AuditNote | None = None
    ) -> ConcurrencyLimit | None:
        """Remove the concurrency limit of exactly ``(kind, key, scope)``; it, or None."""
        target = (kind, key, scope)
        return self._clear(self._concurrency, target, AuditAction.CONCURRENCY_CLEARED, note)

    def _set(
        self, table: dict[Any, L], key: Any, control: L, action: AuditAction, note: AuditNote | None
    ) -> L:
        """Store ``control`` under ``key`` with the store's time, audited as ``note`` says."""
        with self._lock:
            now = self.now()
            stored = attrs.evolve(control, updated_at=now)
            table[key] = stored
            self._control_audit(note, action, stored, now)
        return stored

    def _clear(
        self,
        table: dict[Any, L],
        key: Any,
        action: AuditAction,
        note: AuditNote | None,
        then: Callable[[L], None] | None = None,
    ) -> L | None:
        """Remove what ``table`` holds under ``key`` (and, under the same lock, ``then``
        with it); it, or None."""
        with self._lock:
            cleared = table.pop(key, None)
            if cleared is not None:
                if then is not None:
                    then(cleared)
                self._control_audit(note, action, cleared, self.now())
        return cleared

    def restore_controls(self, controls: Controls) -> None:
        """Put the controls back as they were (a change whose audit sink raised)."""
        with self._lock:
            self._pauses = {(p.kind, p.tenant): p for p in controls.pauses}
            self._limits = {(x.kind, x.tenant, x.provider): x for x in controls.limits}
            self._concurrency = {(c.kind, c.key, c.scope): c for c in controls.concurrency}
            for worker_id, row in self._workers.items():
                row.request = controls.request_for(worker_id)

    def _control_audit(
        self,
        note: AuditNote | None,
        action: AuditAction,
        control: Pause | Limit | ConcurrencyLimit,
        now: datetime,
    ) -> None:
        # Under the lock: the event goes to the audit table, or to the sink's note.
        if note is None:
            return
        event = control_event(action, control, note.actor, now)
        (self._audit if note.table else note.events).append(event)
