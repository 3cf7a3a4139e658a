"""The in-memory job store (async source; ``_store.py`` is its generated sync twin).

A complete store for unit tests and demos: it passes the same contract suite as the
PostgreSQL adapters. All logic lives in :class:`~._state.MemoryState`; the store only
adapts it to the port's calling convention, one class per role of :mod:`skiplock.ports`
over the transactions of ``_transaction_async`` (each class names the contract-kit mixins
that test it; ``_state``'s docstring has the whole table). The audit trail's contract
(J10) spans every role that changes jobs, the model check the whole store.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from skiplock._compat_async import ThreadSafeEvent
from skiplock.core import JobFilter

from ._state import AuditNote, MemoryState
from ._transaction_async import AsyncMemoryTransactions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from datetime import datetime, timedelta

    from skiplock.core import (
        AuditEvent,
        ClaimRequest,
        Completion,
        EnqueueRequest,
        EnqueueResult,
        Event,
        FinishedCount,
        HealthSnapshot,
        Job,
        JobPage,
        Lease,
        NextDue,
        Page,
        StateCount,
        WorkerInfo,
    )
    from skiplock.core.store import (
        ClaimedJobs,
        ConcurrencyLimit,
        Controls,
        Limit,
        Pause,
        QueueSample,
        Retention,
        WorkerRequest,
    )
    from skiplock.ports import AsyncAudit, Clock


class AsyncMemoryJobs(AsyncMemoryTransactions):
    """The enqueue path and a worker's run of a job.

    ``JobsRole`` (state: ``_state._jobs``), tested by the kit's ``AsyncEnqueueContract``,
    ``AsyncIdempotencyContract``, ``AsyncClaimContract``, ``AsyncRateContract``,
    ``AsyncCompletionContract``, ``AsyncResultsContract`` and ``AsyncLifecycleContract``
    (which spans ``JobsRole`` and ``WorkersRole``).
    """

    async def enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[EnqueueResult]:
        """Create jobs (already validated), all or none; results in request order."""
        if audit is None:
            return self._state.enqueue(requests, connection)
        async with self._audited(connection, audit, kept=False) as (handle, note):
            results = self._state.enqueue(requests, handle, note)
        return results

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        """Atomically move due pending jobs to running for ``request.worker_id``; the
        first ``request.start_now`` start, the rest are held until :meth:`start`.
        (Every row here is a job, so a claim buries nothing and audits nothing.)"""
        return self._state.claim(request)

    async def start(self, leases: Sequence[Lease]) -> list[bool]:
        """Begin held jobs (attempts += 1); False where the lease was lost."""
        return self._state.start(leases)

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        """Record outcomes, each fenced by its lease; True where it was applied."""
        if audit is None:
            return self._state.complete(completions, connection)
        async with self._audited(connection, audit, kept=True) as (handle, note):
            applied = self._state.complete(completions, handle, note)
        return applied

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """One job, or None."""
        return self._state.get(job_id, connection)


class AsyncInMemoryNotifier:
    """Woken by the store's writes that make a job claimable, from any thread.

    A wakeup that arrives while nobody waits is remembered: the next :meth:`wait`
    returns True at once (several such wakeups count as one). Wakeups before
    :meth:`start` (or after :meth:`close`) are not heard.
    """

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._event: ThreadSafeEvent | None = None

    async def start(self) -> None:
        """Begin listening. Idempotent."""
        if self._event is None:
            # Created here: the async flavour binds it to the running loop.
            self._event = ThreadSafeEvent()
            self._state.subscribe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a wakeup arrived (or was pending).

        Starts listening first if :meth:`start` was not called.
        """
        await self.start()
        event = self._event
        assert event is not None
        woken = await event.wait(max(timeout, 0.0))
        if woken:
            event.clear()
        return woken

    async def close(self) -> None:
        """Stop listening. Idempotent."""
        if self._event is not None:
            self._state.unsubscribe(self._event.set)
            self._event = None


class AsyncMemoryWorkers(AsyncMemoryTransactions):
    """Worker registration, heartbeats, recovery and wakeups.

    ``WorkersRole`` (state: ``_state._workers``), tested by the kit's
    ``AsyncWorkersContract`` (which spans ``WorkersRole`` and ``UpkeepRole``),
    ``AsyncNotifierContract`` and the worker tests of ``AsyncClaimContract`` and
    ``AsyncLifecycleContract``.
    """

    _notifiers: list[AsyncInMemoryNotifier]

    async def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` (None: any) that is not
        due yet falls due, on the store's clock; None if there is none."""
        return self._state.next_due(kinds, tenants)

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh a worker row (heartbeat = now); jobs an earlier life of
        this worker id left running go back to pending."""
        self._state.register_worker(info)

    async def heartbeat(
        self, worker_id: str, running: Sequence[int] = (), *, release_unheld: bool = False
    ) -> list[int] | None:
        """Refresh the heartbeat; None if the worker row is gone, else the ids among
        ``running`` no longer running under this worker (``release_unheld``: see the
        port)."""
        return self._state.heartbeat(worker_id, running, release_unheld=release_unheld)

    async def unregister_worker(self, worker_id: str) -> list[int]:
        """Remove the worker row (clean shutdown) and release the jobs still running under
        its id; returns their ids."""
        return self._state.unregister_worker(worker_id)

    async def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Return stale running jobs to pending (or dead), then drop long-silent worker
        rows; returns the jobs' ids."""
        if audit is None:
            return self._state.recover_stale(default_ttl=default_ttl, ttls=ttls)
        async with self._audited(None, audit, kept=True) as (_, note):
            recovered = self._state.recover_stale(default_ttl=default_ttl, ttls=ttls, audit=note)
        return recovered

    def notifier(self) -> AsyncInMemoryNotifier:
        """A new notifier woken by this store's writes."""
        notifier = AsyncInMemoryNotifier(self._state)
        self._notifiers.append(notifier)
        return notifier


class AsyncMemoryControls(AsyncMemoryTransactions):
    """Pauses and limits, read and changed.

    ``ControlsRole`` (state: ``_state._controls``), tested by the kit's
    ``AsyncControlsContract``.
    """

    async def controls(self) -> Controls:
        """Every pause and limit, in the order they were first set."""
        return self._state.controls()

    async def pause(self, pause: Pause, *, audit: AsyncAudit | None = None) -> Pause:
        """Set the pause (audited with ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.pause(pause, note)

    async def resume(
        self, kind: str | None, tenant: str | None, *, audit: AsyncAudit | None = None
    ) -> Pause | None:
        """Lift the pause of exactly ``(kind, tenant)`` (audited with ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.resume(kind, tenant, note)

    async def set_limit(self, limit: Limit, *, audit: AsyncAudit | None = None) -> Limit:
        """Set the limit (audited with ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.set_limit(limit, note)

    async def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        *,
        audit: AsyncAudit | None = None,
    ) -> Limit | None:
        """Remove the limit of exactly ``(kind, tenant)`` or ``provider`` (audited with
        ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.clear_limit(kind, tenant, provider, note)

    async def set_concurrency(
        self, limit: ConcurrencyLimit, *, audit: AsyncAudit | None = None
    ) -> ConcurrencyLimit:
        """Set the concurrency limit (audited with ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.set_concurrency(limit, note)

    async def clear_concurrency(
        self,
        kind: str | None,
        key: str | None,
        scope: str,
        *,
        audit: AsyncAudit | None = None,
    ) -> ConcurrencyLimit | None:
        """Remove the concurrency limit of exactly ``(kind, key, scope)`` (audited with
        ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.clear_concurrency(kind, key, scope, note)

    async def request_worker(
        self,
        worker_id: str,
        action: str,
        *,
        actor: str | None = None,
        audit: AsyncAudit | None = None,
    ) -> WorkerRequest | None:
        """Ask the worker to drain or stop (audited with ``audit``)."""
        async with self._control_audit(audit) as note:
            return self._state.request_worker(worker_id, action, actor, note)

    @asynccontextmanager
    async def _control_audit(self, audit: AsyncAudit | None) -> AsyncIterator[AuditNote | None]:
        """The note a control change audits in; with a sink, the sink gets its events
        (no transaction handle: the change applied at once) and a sink that raises undoes
        the change."""
        if audit is None:
            yield None
            return
        note = AuditNote(actor=audit.actor, table=audit.sink is None)
        before = self._state.controls()
        yield note
        if audit.sink is not None and note.events:
            try:
                await audit.sink.record(note.events, None)
            except BaseException:
                self._state.restore_controls(before)
                raise


class AsyncMemoryReads(AsyncMemoryTransactions):
    """What the admin reads, the dashboard and the exporter need.

    ``ReadsRole`` (state: ``_state._reads``), tested by the kit's ``AsyncHealthContract``,
    ``AsyncThroughputContract``, ``AsyncRecountContract``, ``AsyncHistoryContract`` (which
    spans ``ReadsRole`` and ``UpkeepRole``) and the reads of ``AsyncAdminContract``.
    """

    async def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        """Jobs matching ``filter`` ordered by id (keyset page)."""
        return self._state.list_jobs(filter, page)

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant), zero counts omitted."""
        return self._state.counts()

    async def finished_counts(self, since: datetime, bucket: timedelta) -> list[FinishedCount]:
        """Jobs finished at or after ``since`` per bucket, final state and kind."""
        return self._state.finished_counts(since, bucket)

    async def queue_samples(self, since: datetime, bucket: timedelta) -> list[QueueSample]:
        """The queue samples taken at or after ``since``, folded per bucket and kind."""
        return self._state.queue_samples(since, bucket)

    async def health_snapshot(self) -> HealthSnapshot:
        """Workers and per-kind queues for the health report (no schema to report)."""
        return self._state.health_snapshot()

    async def audit_trail(self, job_id: int, *, connection: Any = None) -> list[AuditEvent]:
        """The job's events in the audit table, oldest first."""
        return self._state.audit_trail(job_id, connection)

    async def retention(self, *, jobs: timedelta | None, audit: timedelta | None) -> Retention:
        """The retention view, counted exactly (see the reads role)."""
        return self._state.retention(jobs, audit)


class AsyncMemoryAdmin(AsyncMemoryTransactions):
    """Operator transitions and deletion of jobs.

    ``AdminRole`` (state: ``_state._admin``), tested by the kit's ``AsyncAdminContract``
    (which spans ``AdminRole`` and ``ReadsRole``).
    """

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Operator transition (CANCEL, MARK_FAILED, REPLAY); returns the changed ids."""
        changed = await self._apply(filter, event, reset_attempts, connection, audit)
        return [job.id for job in changed]

    async def apply_job(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> Job | None:
        """:meth:`apply` of one job, returning it as it is after the change (one step
        under the state's lock); None if it does not exist or its state refuses
        ``event``."""
        one = JobFilter(ids=frozenset({job_id}))
        changed = await self._apply(one, event, reset_attempts, connection, audit)
        return changed[0] if changed else None

    async def _apply(
        self,
        filter: JobFilter,
        event: Event,
        reset_attempts: bool,
        connection: Any,
        audit: AsyncAudit | None,
    ) -> list[Job]:
        if audit is None:
            return self._state.apply(
                filter, event, reset_attempts=reset_attempts, connection=connection
            )
        async with self._audited(connection, audit, kept=False) as (handle, note):
            changed = self._state.apply(
                filter, event, reset_attempts=reset_attempts, connection=handle, audit=note
            )
        return changed

    async def delete(
        self, filter: JobFilter, *, connection: Any = None, audit: AsyncAudit | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running; returns what was deleted."""
        if audit is None:
            return self._state.delete(filter, connection)
        async with self._audited(connection, audit, kept=False) as (handle, note):
            deleted = self._state.delete(filter, handle, note)
        return deleted


class AsyncMemoryUpkeep(AsyncMemoryTransactions):
    """Roll-ups, the maintenance lease and retention.

    ``UpkeepRole`` (state: ``_state._upkeep``), tested by the maintenance and retention
    tests of the kit's ``AsyncWorkersContract``, ``AsyncHistoryContract``'s sampling,
    ``AsyncIdempotencyContract``'s remembered keys and ``AsyncAuditContract``'s
    retention.
    """

    async def roll_up_counts(self) -> int:
        """Nothing to fold (the memory store counts its jobs directly): takes this
        minute's queue samples if not taken yet."""
        self._state.take_samples()
        return 0

    async def try_maintenance(self, name: str, every: timedelta) -> bool:
        """Take the right to run maintenance task ``name`` now, once per ``every``."""
        return self._state.try_maintenance(name, every)

    async def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        """Delete (or archive, see :meth:`archived`) old succeeded jobs; returns how many."""
        return self._state.purge(
            older_than=older_than, archive=archive, batch_size=batch_size, key_window=key_window
        )

    async def purge_audit(self, *, older_than: timedelta, batch_size: int) -> int:
        """Delete the audit events older than ``older_than``; returns how many."""
        return self._state.purge_audit(older_than=older_than, batch_size=batch_size)

    def archived(self) -> dict[int, Job]:
        """Jobs moved out by ``purge(archive=True)``, by id."""
        return self._state.archived()


class AsyncInMemoryJobStore(
    AsyncMemoryJobs,
    AsyncMemoryWorkers,
    AsyncMemoryControls,
    AsyncMemoryReads,
    AsyncMemoryAdmin,
    AsyncMemoryUpkeep,
):
    """The job store port implemented in process memory.

    ``clock`` is the store's clock (default: the system clock); pass a
    :class:`skiplock.testing.FakeClock` to control due times in tests. The store is
    thread-safe. ``transaction()`` yields an :class:`InMemoryTransaction` accepted as
    ``connection=``; its writes apply atomically at commit. ``statement_timeout`` of
    ``transaction()`` and ``autocommit()`` is accepted and ignored (nothing here blocks on
    a database).

    Audit (J10): without a sink the events go to the state's audit table, committed with
    the transaction's writes. An audit sink is called with the events of a change the
    caller asked for (enqueue, apply, apply_job, delete) in a transaction: the caller's (undone back
    to where the call began if the sink raises) or one of the store's own (rolled back
    if it raises), and gets that transaction's handle. A worker's change (complete,
    recover_stale) applies first; the sink then gets the job's transaction handle (what
    it wrote there is undone if it raises) or None, and its error is logged.
    """

    def __init__(self, clock: Clock | None = None, *, state: MemoryState | None = None) -> None:
        if state is not None and clock is not None:
            raise TypeError("pass either clock= or state= (the state has its own clock)")
        self._state = state if state is not None else MemoryState(clock)
        self._notifiers: list[AsyncInMemoryNotifier] = []

    @property
    def state(self) -> MemoryState:
        """The shared state; another store built with ``state=`` sees the same jobs."""
        return self._state

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    async def close(self) -> None:
        """Close the notifiers handed out; the jobs stay readable. Idempotent."""
        notifiers, self._notifiers = self._notifiers, []
        for notifier in notifiers:
            await notifier.close()
