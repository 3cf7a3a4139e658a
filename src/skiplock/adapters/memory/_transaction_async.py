"""The in-memory store's transactions (async source; ``_transaction.py`` is its generated
twin): ``transaction()``, ``autocommit()`` and the handle an audited change runs in.

Part of ``JobsRole`` (:mod:`skiplock.ports`); the state's side is ``_state._transaction``.
Tested by the kit's ``AsyncTransactionContract`` and ``AsyncAtomicityContract``
(``AsyncStatementTimeoutContract`` is skipped: the memory store has no statement to bound),
and the sink tests of ``AsyncAuditContract``.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ._state import AuditNote, InMemoryTransaction, MemoryState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from datetime import datetime

    from skiplock.ports import AsyncAudit


class AsyncMemoryTransactions:
    """What every role of the in-memory store builds on: the state it wraps, its clock and
    its transactions."""

    _state: MemoryState

    async def now(self) -> datetime:
        """The store's clock."""
        return self._state.now()

    @asynccontextmanager
    async def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[InMemoryTransaction]:
        """Buffer writes made with ``connection=tx``; commit on exit, discard on error.

        ``statement_timeout`` is ignored.
        """
        tx = self._state.begin()
        try:
            yield tx
        except BaseException:
            self._state.rollback(tx)
            raise
        self._state.commit(tx)

    @asynccontextmanager
    async def autocommit(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[InMemoryTransaction]:
        """A handle whose writes apply immediately (``statement_timeout`` is ignored)."""
        handle = self._state.begin(autocommit=True)
        try:
            yield handle
        finally:
            self._state.rollback(handle)

    @asynccontextmanager
    async def _audited(
        self, connection: Any, audit: AsyncAudit, *, kept: bool
    ) -> AsyncIterator[tuple[Any, AuditNote]]:
        """The handle for a change audited by ``audit`` and the note it collects events
        in; with a sink, the sink is called as :class:`~._store_async.AsyncInMemoryJobStore`
        says."""
        note = AuditNote(actor=audit.actor, table=audit.sink is None)
        state = self._state
        tx = state.handle(connection)
        if audit.sink is None or kept:
            yield connection, note
            if not note.events:
                return
            if tx is None or tx.autocommit:
                await audit.record_kept(note.events, connection)
                return
            # In a job's transaction: what a failing sink wrote there goes, the change stays.
            savepoint = state.savepoint(tx)
            if not await audit.record_kept(note.events, tx):
                state.rollback_to(tx, savepoint)
        elif tx is None or tx.autocommit:
            own = state.begin()
            try:
                yield own, note
                if note.events:
                    await audit.sink.record(note.events, own)
            except BaseException:
                state.rollback(own)
                raise
            state.commit(own)
        else:
            savepoint = state.savepoint(tx)
            try:
                yield tx, note
                if note.events:
                    await audit.sink.record(note.events, tx)
            except Exception:
                state.rollback_to(tx, savepoint)
                raise
