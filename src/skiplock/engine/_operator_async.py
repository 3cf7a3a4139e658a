"""The operator handle (async source; ``_operator.py`` is the sync twin): the admin API
and enqueue acting as one person or service.

Every front door (the CLI, the REST API, the dashboard, the Django admin) obtains one
from :meth:`AsyncEngine.operator` with the actor it authenticated and calls it; the
audit trail (J10) then names that actor for every change it makes, enqueues included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core import check_actor

from ._admin_async import AsyncAdminOps
from ._enqueue_ops_async import AsyncEnqueueOps

if TYPE_CHECKING:
    from ._engine_async import AsyncEngine


class AsyncOperator(AsyncEnqueueOps, AsyncAdminOps):
    """The engine's admin API and enqueue, acting as :attr:`actor`.

    Obtained from :meth:`AsyncEngine.operator`; cheap to make (one per request is fine).
    The methods are the engine's (:meth:`~AsyncEngine.list_jobs`,
    :meth:`~AsyncEngine.retry_job`, :meth:`~AsyncEngine.enqueue`, ...); the changes they
    make are audited as :attr:`actor` (an explicit ``actor=`` still overrides it for one
    call). It uses the engine's store, settings and audit sink as they are when it is
    made: after :meth:`AsyncEngine.configure`, make a new one.
    """

    def __init__(self, engine: AsyncEngine, actor: str | None = None) -> None:
        if actor is not None:
            check_actor("actor", actor)
        self._engine = engine
        self._store = engine.store
        self._settings = engine.settings
        self._tracer = engine.tracer
        self._traced = engine._traced
        self._intake = engine._intake
        audit = engine.audit
        # The audit of this operator's changes (None while the audit trail is off).
        self._audit = audit if audit is None or actor is None else attrs.evolve(audit, actor=actor)
        self._actor = actor if actor is not None else engine.settings.audit_actor

    @property
    def actor(self) -> str | None:
        """Who the audit trail names for this operator's changes (the engine's
        ``Settings.audit_actor`` when it was made without one; None: nobody)."""
        return self._actor

    @property
    def engine(self) -> AsyncEngine:
        """The engine it acts on."""
        return self._engine

    def __repr__(self) -> str:
        return f"{type(self).__name__}(actor={self._actor!r})"
