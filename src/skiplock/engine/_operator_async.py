"""The operator handle (async source; ``_operator.py`` is the sync twin): the admin API
and enqueue acting as one person or service.

Every front door (the CLI, the REST API, the dashboard, the Django admin) obtains one
from :meth:`AsyncEngine.operator` with the actor it authenticated and calls it; the
audit trail (J10) then names that actor for every change it makes, enqueues included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core.rules import check_actor

from ._observe import traces
from .admin._controls_async import AsyncControlOps
from .enqueue._ops_async import AsyncEnqueueOps

if TYPE_CHECKING:
    from skiplock.ports import AsyncAudit, AsyncJobStore, Tracer

    from ._controls import ControlsCache
    from .enqueue._intake import Intake
    from .settings._settings import Settings


class AsyncOperator(AsyncEnqueueOps, AsyncControlOps):
    """The engine's admin API and enqueue, acting as :attr:`actor`.

    Obtained from :meth:`AsyncEngine.operator`; cheap to make (one per request is fine).
    The methods are the engine's (:meth:`~AsyncEngine.list_jobs`,
    :meth:`~AsyncEngine.retry_job`, :meth:`~AsyncEngine.enqueue`, ...); the changes they
    make are audited as :attr:`actor` (the only way to name who acts: no method takes
    ``actor=``). It uses the engine's store, settings and audit sink as they are when it is
    made: after :meth:`AsyncEngine.configure`, make a new one.
    """

    # Every role: the mixins each take the roles they use (docs/architecture.md).
    _store: AsyncJobStore

    def __init__(
        self,
        store: AsyncJobStore,
        settings: Settings,
        intake: Intake,
        tracer: Tracer,
        audit: AsyncAudit | None,
        actor: str | None = None,
        controls: ControlsCache | None = None,
    ) -> None:
        # The engine makes operators (AsyncEngine.operator); these are its parts.
        if actor is not None:
            check_actor("actor", actor)
        self._store = store
        self._settings = settings
        self._intake = self._kind_check = intake
        self._tracer = tracer
        self._traced = traces(tracer)
        # The audit of this operator's changes (None while the audit trail is off): the
        # admin and enqueue mixins record every change with it, so it names the actor.
        self._audit = audit if audit is None or actor is None else attrs.evolve(audit, actor=actor)
        self._actor = actor if actor is not None else settings.audit_actor
        self._controls = controls

    @property
    def actor(self) -> str | None:
        """Who the audit trail names for this operator's changes (the engine's
        ``Settings.audit_actor`` when it was made without one; None: nobody)."""
        return self._actor

    def _actor_of_changes(self) -> str | None:
        return self._actor

    def __repr__(self) -> str:
        return f"{type(self).__name__}(actor={self._actor!r})"
