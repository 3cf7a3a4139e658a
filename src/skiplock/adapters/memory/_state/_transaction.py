"""The memory state's transactions: handles, buffered writes, savepoints and the
optimistic commit.

Part of ``JobsRole`` (``transaction()``, ``autocommit()`` and every ``connection=`` of
:mod:`skiplock.ports`). Tested by the kit's ``AsyncTransactionContract`` and
``AsyncAtomicityContract`` (``AsyncStatementTimeoutContract`` too, which the memory store
skips: it has no statement to bound). :class:`Scope` is what one operation of any role sees
through a transaction, and where its writes and audit events go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core import (
    AuditAction,
    AuditEvent,
    Job,
    LeaseLostError,
    StoreError,
    ValidationError,
    completion_action,
    dlq_details,
)
from skiplock.core.store import ScopedKey, job_scoped_key

from ._base import AuditNote, StateBase

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from datetime import datetime


@attrs.frozen
class Savepoint:
    """A transaction's buffers as they were (see :meth:`Transactions.savepoint`)."""

    seen: dict[int, Job | None]
    writes: dict[int, Job | None]
    keys: dict[ScopedKey, int]
    fenced: set[int]
    audit: list[AuditEvent]


class InMemoryTransaction:
    """Handle yielded by the in-memory stores' ``transaction()`` and ``autocommit()``.

    Pass it as ``connection=``. In a transaction, writes are buffered and applied
    atomically at commit; the transaction's own reads (``get``) see them. Commit is
    optimistic: if a job the transaction wrote was changed by someone else meanwhile,
    nothing is applied and the commit raises :class:`~skiplock.core.LeaseLostError` (when
    a fenced completion is involved) or :class:`~skiplock.core.StoreError`. A job whose
    idempotency key was committed by someone else first is silently not created (the key
    keeps its first job). With ``autocommit``, every write applies at once.
    """

    def __init__(self, state: StateBase, *, autocommit: bool) -> None:
        self._state = state
        self.autocommit = autocommit
        self.closed = False
        # job id -> the committed row when the transaction first wrote it (None: new job)
        self._seen: dict[int, Job | None] = {}
        # job id -> the row as this transaction left it (None: deleted)
        self._writes: dict[int, Job | None] = {}
        # idempotency key (with its scope) -> id of the job this transaction created with it
        self._keys: dict[ScopedKey, int] = {}
        # ids whose write was fenced by a lease
        self._fenced: set[int] = set()
        # audit events written in this transaction (J10)
        self._audit: list[AuditEvent] = []

    def __repr__(self) -> str:
        kind = "autocommit" if self.autocommit else "transaction"
        status = "closed" if self.closed else f"{len(self._writes)} pending writes"
        return f"<InMemoryTransaction {kind}, {status}>"


class Scope:
    """What one operation sees (committed rows, overlaid by a transaction's writes) and
    where its writes go. Used only under the state's lock."""

    def __init__(self, state: StateBase, tx: InMemoryTransaction | None, now: datetime):
        self.state = state
        self.tx = tx
        self.now = now

    def get(self, job_id: int) -> Job | None:
        if self.tx is not None and job_id in self.tx._writes:
            return self.tx._writes[job_id]
        return self.state._jobs.get(job_id)

    def rows(self) -> Iterator[Job]:
        writes = self.tx._writes if self.tx is not None else {}
        for job_id, job in self.state._jobs.items():
            if job_id not in writes:
                yield job
        for written in writes.values():
            if written is not None:
                yield written

    def key_owner(self, key: ScopedKey) -> int | None:
        if self.tx is not None and key in self.tx._keys:
            job_id = self.tx._keys[key]
            if self.tx._writes.get(job_id) is not None:
                return job_id
        owner = self.state._keys.get(key)
        if owner is not None and self.get(owner) is None:
            return None  # deleted earlier in this transaction
        return owner

    def put(self, job: Job, *, fenced: bool = False) -> None:
        if self.tx is None:
            self.state._commit_row(job, self.now)
            return
        tx = self.tx
        if job.id not in tx._seen:
            tx._seen[job.id] = self.state._jobs.get(job.id)
            key = job_scoped_key(job)
            if tx._seen[job.id] is None and key is not None:
                tx._keys[key] = job.id
        tx._writes[job.id] = job
        if fenced:
            tx._fenced.add(job.id)

    def remove(self, job_id: int) -> None:
        if self.tx is None:
            self.state._commit_remove(job_id)
            return
        if job_id not in self.tx._seen:
            self.tx._seen[job_id] = self.state._jobs.get(job_id)
        self.tx._writes[job_id] = None

    def audit(
        self,
        note: AuditNote | None,
        action: AuditAction,
        job: Job,
        details: Mapping[str, object] | None = None,
    ) -> None:
        """Record ``action`` on ``job`` as ``note`` says: in the audit table (with the
        transaction's writes) or for the sink (J10)."""
        if note is None:
            return
        event = AuditEvent(
            action=action,
            job_id=job.id,
            kind=job.kind,
            tenant=job.tenant,
            actor=note.actor,
            at=self.now,
            details=details,
        )
        if not note.table:
            note.events.append(event)
        elif self.tx is None:
            self.state._audit.append(event)
        else:
            self.tx._audit.append(event)


def audit_end(scope: Scope, note: AuditNote | None, row: Job) -> None:
    """Audit a job a worker or maintenance moved out of ``running``: success and dead
    are audited, a return to pending is not (J10)."""
    action = completion_action(row.state)
    if action is AuditAction.DLQ:
        scope.audit(note, action, row, dlq_details(row.last_error, row.attempts))
    elif action is not None:
        scope.audit(note, action, row)


class Transactions(StateBase):
    """Opening, committing and rolling back transactions; resolving ``connection=``."""

    def _scope(self, connection: object) -> Scope:
        """Resolve ``connection=`` (call under the lock)."""
        now = self.now()
        if connection is None:
            return Scope(self, None, now)
        tx = self._check_handle(connection)
        return Scope(self, None if tx.autocommit else tx, now)

    def _check_handle(self, connection: object) -> InMemoryTransaction:
        if not isinstance(connection, InMemoryTransaction):
            raise TypeError(
                "connection= must be a handle from this in-memory store's transaction() or "
                f"autocommit(), got {type(connection).__name__}"
            )
        if connection._state is not self:
            raise ValidationError(
                "connection= is a transaction of another in-memory store; "
                "use a handle from this store's transaction()"
            )
        if connection.closed:
            raise ValidationError(
                "connection= is a transaction that was already committed or rolled back"
            )
        return connection

    def begin(self, *, autocommit: bool = False) -> InMemoryTransaction:
        """A new handle (see :class:`InMemoryTransaction`)."""
        return InMemoryTransaction(self, autocommit=autocommit)

    def commit(self, tx: InMemoryTransaction) -> None:
        """Apply a transaction's writes atomically, or raise and apply nothing."""
        with self._writing():
            self._check_handle(tx)
            try:
                self._apply_transaction(tx)
            finally:
                tx.closed = True

    def rollback(self, tx: InMemoryTransaction) -> None:
        """Discard a transaction's writes. Idempotent."""
        with self._lock:
            if tx._state is not self:
                raise ValidationError("rollback() of a transaction of another in-memory store")
            tx.closed = True

    def savepoint(self, tx: InMemoryTransaction) -> Savepoint:
        """The transaction's writes so far, for :meth:`rollback_to`."""
        with self._lock:
            self._check_handle(tx)
            return Savepoint(
                seen=dict(tx._seen),
                writes=dict(tx._writes),
                keys=dict(tx._keys),
                fenced=set(tx._fenced),
                audit=list(tx._audit),
            )

    def rollback_to(self, tx: InMemoryTransaction, savepoint: Savepoint) -> None:
        """Undo what the transaction wrote since ``savepoint``; it stays open."""
        with self._lock:
            tx._seen = dict(savepoint.seen)
            tx._writes = dict(savepoint.writes)
            tx._keys = dict(savepoint.keys)
            tx._fenced = set(savepoint.fenced)
            tx._audit = list(savepoint.audit)

    def handle(self, connection: object) -> InMemoryTransaction | None:
        """The transaction handle ``connection=`` names (checked), or None."""
        if connection is None:
            return None
        with self._lock:
            return self._check_handle(connection)

    def _apply_transaction(self, tx: InMemoryTransaction) -> None:
        changed = [
            job_id
            for job_id, seen in tx._seen.items()
            if seen is not None and self._jobs.get(job_id) is not seen
        ]
        lost = [job_id for job_id in changed if job_id in tx._fenced]
        if lost:
            raise LeaseLostError(
                f"job(s) {sorted(lost)} changed since this transaction completed them "
                "(the claim was lost); the transaction was rolled back"
            )
        if changed:
            raise StoreError(
                f"job(s) {sorted(changed)} changed concurrently since this transaction wrote "
                "them; the transaction was rolled back"
            )
        now = self.now()
        created: list[Job] = []
        for job_id, job in tx._writes.items():
            if tx._seen[job_id] is None:
                if job is not None:
                    created.append(job)
            elif job is None:
                self._commit_remove(job_id)
            else:
                self._commit_row(job, now)
        # After the removals, so a key freed by this transaction may be reused by it.
        dropped: set[int] = set()
        for job in created:
            key = job_scoped_key(job)
            if key is not None and key in self._keys:
                dropped.add(job.id)  # committed first by someone else: the key keeps that job
                continue
            self._commit_row(job, now)
        self._audit.extend(event for event in tx._audit if event.job_id not in dropped)
