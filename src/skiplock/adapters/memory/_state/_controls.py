"""The memory state's ``ControlsRole`` (:mod:`skiplock.ports`): pauses and limits set at
run time (issue 30). Tested by the kit's ``AsyncControlsContract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core import AuditAction
from skiplock.core.store import Controls, Limit, Pause, control_event

from ._base import AuditNote, StateBase

if TYPE_CHECKING:
    from datetime import datetime


class ControlsState(StateBase):
    """Pauses and limits, in the order they were first set."""

    def controls(self) -> Controls:
        """Every pause and limit, in the order they were first set."""
        with self._lock:
            pauses, limits = tuple(self._pauses.values()), tuple(self._limits.values())
        return Controls(pauses=pauses, limits=limits)

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
        with self._lock:
            now = self.now()
            stored = attrs.evolve(limit, updated_at=now)
            self._limits[(limit.kind, limit.tenant, limit.provider)] = stored
            self._control_audit(note, AuditAction.LIMIT_SET, stored, now)
        return stored

    def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        note: AuditNote | None = None,
    ) -> Limit | None:
        """Remove the limit of exactly ``(kind, tenant)`` or ``provider``; it, or None."""
        with self._lock:
            cleared = self._limits.pop((kind, tenant, provider), None)
            if cleared is not None:
                self._control_audit(note, AuditAction.LIMIT_CLEARED, cleared, self.now())
        return cleared

    def restore_controls(self, controls: Controls) -> None:
        """Put the controls back as they were (a change whose audit sink raised)."""
        with self._lock:
            self._pauses = {(p.kind, p.tenant): p for p in controls.pauses}
            self._limits = {(x.kind, x.tenant, x.provider): x for x in controls.limits}

    def _control_audit(
        self, note: AuditNote | None, action: AuditAction, control: Pause | Limit, now: datetime
    ) -> None:
        # Under the lock: the event goes to the audit table, or to the sink's note.
        if note is None:
            return
        event = control_event(action, control, note.actor, now)
        (self._audit if note.table else note.events).append(event)
