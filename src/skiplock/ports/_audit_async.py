"""The audit sink port (J10) (async source; ``_audit.py`` is the sync twin).

A store call that changes jobs takes ``audit=``: an :class:`AsyncAudit` naming the
actor and the sink. Without a sink the store writes its own audit table in the statement
of the change; with one it calls :meth:`AsyncAuditSink.record` inside the change's
transaction (docs/audit.md, "Audit trail").
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from skiplock.core import AuditEvent

logger = logging.getLogger("skiplock.audit")


class AsyncAuditSink(Protocol):
    """Where audit events go besides the store's own table: a platform's audit log."""

    async def record(self, events: Sequence[AuditEvent], connection: Any) -> None:
        """Record the events of one change, inside the change's transaction.

        ``connection`` is what the change is written on: a PostgreSQL store passes its
        driver's connection (psycopg or asyncpg connection, SQLAlchemy ``Connection``) in
        the open transaction, so writes through it commit or roll back with the change;
        the in-memory store passes its transaction handle, or None when the change
        applied at once. Called once per change that produced events (never with none).
        """
        ...


@attrs.frozen
class AsyncAudit:
    """How a store call audits the change it makes (J10).

    ``actor`` is who made the change (None: unknown). ``sink`` None means the store's
    own audit table, written in the statement of the change; otherwise the store calls
    ``sink.record`` in the change's transaction.
    """

    actor: str | None = None
    sink: AsyncAuditSink | None = None

    async def record_kept(self, events: Sequence[AuditEvent], connection: Any) -> bool:
        """Record the events of a change that stands whatever the sink does (a worker's
        or maintenance's transition); False if the sink raised.

        Refusing a job's outcome because the audit log is down would re-run the job, or
        stall every worker; instead the error is logged on the ``skiplock.audit`` logger
        with the events that were not recorded.
        """
        assert self.sink is not None, "the store writes its own table"
        try:
            await self.sink.record(events, connection)
        except Exception:
            logger.exception(
                "the audit sink failed; the change stands without these %d audit event(s): %s",
                len(events),
                ", ".join(f"{e.action.value} job {e.job_id} by {e.actor}" for e in events),
            )
            return False
        return True


class AsyncCallbackAuditSink:
    """An audit sink that calls ``callback(events, connection)`` (see
    :meth:`AsyncAuditSink.record`).

    Async only: the callback may be a plain or an async function; what it returns is
    awaited if it is awaitable.

    Sync only: a callback that returns an awaitable (an async function) raises TypeError:
    a sync engine has no event loop to run it on.
    """

    def __init__(self, callback: Callable[[Sequence[AuditEvent], Any], object]) -> None:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        self._callback = callback

    async def record(self, events: Sequence[AuditEvent], connection: Any) -> None:
        """Call the callback with the events and the connection."""
        result = self._callback(events, connection)
        if inspect.isawaitable(result):
            if True:  # ASYNC
                await result
            else:
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: no warning about it
                raise TypeError(
                    "the audit callback returned an awaitable, which a sync engine has no "
                    "event loop to run; give it a plain function"
                )
