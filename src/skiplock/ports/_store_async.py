"""The store and notifier ports (async source; the sync twin is generated).

The store port comes by role; the reads role is in :mod:`._store_reads_async`, the
controls role in :mod:`._store_controls_async`, the others are here, with
``AsyncJobStore``, every role at once.

One call is one transaction or one clearly bounded operation. Ports speak core types
only. The caller's transaction enters as ``connection=``: whatever the adapter's
``transaction()`` yields, or the adapter's native connection/session type (R0). Without
it the store uses its own connection and commits.

Methods that change jobs take ``audit=`` (J10): None (the default) writes no audit
trail and runs exactly what it ran before; an :class:`~._audit_async.AsyncAudit`
records an :class:`~skiplock.core.AuditEvent` per audited change in the change's
transaction (see :class:`AsyncJobStore`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._store_controls_async import AsyncControlsRole
from ._store_reads_async import AsyncReadsRole

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime, timedelta

    from skiplock.core import (
        ClaimRequest,
        Completion,
        EnqueueRequest,
        EnqueueResult,
        Event,
        Job,
        JobFilter,
        Lease,
        NextDue,
        WorkerInfo,
    )
    from skiplock.core.store import ClaimedJobs

    from ._audit_async import AsyncAudit


class AsyncNotifier(Protocol):
    """Wakes an idle worker when jobs may have become claimable (LISTEN/NOTIFY)."""

    async def start(self) -> None:
        """Begin listening. Idempotent."""

    async def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a wakeup arrived (or was pending)."""
        ...

    async def close(self) -> None:
        """Stop listening and release resources."""


class AsyncJobsRole(Protocol):
    """Jobs: the enqueue path and a worker's run of a job (enqueue, claim, start,
    complete, get), in a transaction of the store's or outside one."""

    async def now(self) -> datetime:
        """The store's clock (the database's ``now()``); all due times are on it."""
        ...

    def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """Open a transaction; yields a handle accepted as ``connection=``.

        Commits on normal exit, rolls back on exception. This is the job's transaction
        given to processors as ``ctx.connection`` (R10). ``statement_timeout`` (seconds,
        > 0) bounds every statement run in it (R22; PostgreSQL: ``SET LOCAL
        statement_timeout``); None keeps the server's setting. A store with nothing to
        bound (the in-memory one) accepts and ignores it.
        """
        ...

    def autocommit(
        self, *, statement_timeout: float | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """A connection outside any transaction, for kinds that cannot run in one.

        ``statement_timeout`` as for :meth:`transaction`, set on this connection for as
        long as the block runs (and reset before the connection goes back to a pool).
        """
        ...

    async def enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[EnqueueResult]:
        """Create jobs (already validated), all or none; results in request order.

        An idempotency key that exists in its scope (``request.idempotency_scope``; also
        one created concurrently, or earlier in the same batch) creates nothing and
        returns the existing job's id, ``created=False``; with ``replace_pending`` a
        pending job holding it first takes the request's payload, due time and priority
        (``replaced=True``). A key that :meth:`purge` remembers returns the purged job's
        id, ``purged=True``. Audit: ``job_enqueued`` per job created, ``job_replaced``
        per job replaced. The engine's ``enqueue_many`` passes an
        :class:`~skiplock.core.EnqueueBatch`: a store may write its columns as they are
        (reading its items builds a request per job).
        """
        ...

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        """Atomically move due pending jobs to running for ``request.worker_id``.

        Order: priority DESC, available_at ASC, id ASC; the jobs are returned in that
        order. Each job is claimed by exactly one caller; claims += 1 at claim (the
        returned jobs' ``lease`` carries the new claim count). The jobs at
        :func:`~skiplock.core.charged_positions` (the first ``request.start_now``, or a
        suspect alone) start at once: attempts += 1 and their ``started`` mark is set; the
        rest are held (``started`` cleared) until :meth:`start`. The result says which it
        charged (``ClaimedJobs.charged``, the ids; the worker runs those and holds the
        rest, without deciding again) beside what limits held back. Each returned job's
        ``suspect`` is its value before the claim: it was pending after its worker
        vanished while it was started. Jobs whose ``max_attempts`` was not explicit take
        ``request.max_attempts[kind]`` when given. Honours every limit in the request.

        A store that can hold rows which cannot become a :class:`Job` (PostgreSQL: written
        by plain SQL around enqueue's validation) moves each such row it claims to
        ``dead`` in the same call, ``last_error`` from
        :func:`~skiplock.core.undecodable_error`, and returns the others as the claim
        charged them (``charged`` names only jobs returned). Audit: ``job_dlq`` per such
        row.

        A claim that takes jobs is also a heartbeat: a registered worker's heartbeat is
        refreshed to the store's now in the same transaction, so a job is never claimed
        after its worker's last heartbeat (stale recovery cannot take a job younger than
        the heartbeat). A claim that takes nothing writes nothing; an unregistered worker
        id claims as before (nothing to refresh).
        """
        ...

    async def start(self, leases: Sequence[Lease]) -> list[bool]:
        """Pay for the start of held jobs (see :attr:`ClaimRequest.start_now`): for each
        job still running under its lease (same worker, same claim count) attempts += 1
        and the ``started`` mark set — once per claim: a job whose start was paid already
        keeps its attempts. Returns, per lease in order, whether the job is still this
        worker's; False means it must not run (recovered, cancelled, deleted, claimed
        again).

        A worker calls it before running a recovered held job (``Job.recovered``), and
        for jobs it started without it, to make their attempt count while they run. An
        outcome of a run (:meth:`complete` with anything but ``Release(refund=False)``)
        pays the attempt too if nothing paid for it yet.

        The ``started`` mark lives as long as the claim: :meth:`recover_stale` and
        :meth:`register_worker`'s release keep it (the job comes back as a suspect,
        ``Job.suspect``: its worker may have died of it); every other way out of
        ``running`` (complete, release, operator events) clears it.
        """
        ...

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        """Record outcomes, each fenced by its lease (running, same worker, same claim
        count; the attempt is not checked); True where it was applied.

        An outcome of a run pays the job's attempt if its start was not paid yet (see
        :meth:`start`); ``Release(refund=True)`` then gives it back, ``Release(refund=False)``
        (a held job that never started) changes no attempt. Every outcome clears the
        ``started`` mark and ``recovered``.

        ``completed_at`` (and a retry's due time) is the time of the writing statement,
        not of its transaction's start: inside a job's transaction it is when the job
        completed, not when it began.

        Audit: ``job_done`` per applied success, ``job_dlq`` per applied ``Bury``
        (details: the stored error and the attempts); retries and releases are not
        audited.
        """
        ...

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """One job, or None."""
        ...


class AsyncWorkersRole(Protocol):
    """Workers and recovery: a worker's registration and heartbeat, its wakeups (next
    due, notifier), and the recovery of jobs whose worker vanished."""

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh a worker row (heartbeat = now).

        Jobs still running under ``info.id`` belong to an earlier life of this worker id
        (a worker re-registers only after it dropped every job it held): in the same
        transaction they go back to pending, due as before, attempts and claims unchanged,
        claim cleared, ``recovered`` set (as by :meth:`recover_stale`).
        """

    async def heartbeat(
        self, worker_id: str, running: Sequence[int] = (), *, release_unheld: bool = False
    ) -> list[int] | None:
        """Refresh the worker's heartbeat to the store's now, and check its jobs.

        Returns None if the worker row does not exist (never registered, unregistered,
        or removed by :meth:`recover_stale`): nothing was refreshed, the worker must
        :meth:`register_worker` again to regain crash protection. Otherwise returns the
        ids among ``running`` (the jobs the worker believes it runs) that are no longer
        running under ``worker_id`` — cancelled, marked failed, deleted, recovered,
        claimed by another worker — ascending, each once; the worker should stop them.

        With ``release_unheld``, ``running`` must list every job the worker holds
        (running, prefetched, being started, its outcome not written yet): in the same
        transaction, a job running
        under ``worker_id`` that is *not* in ``running`` and was claimed strictly before
        the worker's previous heartbeat (the ``heartbeat_at`` this call replaces) goes
        back to pending as :meth:`register_worker` releases it (attempts and claims
        unchanged, claim cleared, ``recovered`` set). Such a job is one the worker lost
        track of — a completion a failover to an asynchronous standby undid, a claim
        whose reply never arrived — and nothing else would release it while the worker
        heart-beats (issue 43). The cutoff spares a claim that races the heartbeat: a
        claim that takes jobs refreshes the heartbeat to its own ``claimed_at``, so the
        latest claim's jobs are never older than the cutoff. The worker makes the rule
        safe by never claiming while a heartbeat is in flight (``LeaseKeeper``): every
        claim that committed before the heartbeat's statement had its jobs placed
        before ``running`` was read, so a job missing from ``running`` is not held. The
        worker asks for it after a store error (when an outcome may have been lost) and
        every few heartbeats otherwise: it reads the worker's running jobs, which a plain
        heartbeat (looking up ``running`` by key) does not.
        """
        ...

    async def unregister_worker(self, worker_id: str) -> list[int]:
        """Remove the worker row (clean shutdown; no error if it is gone).

        Jobs still running under ``worker_id`` (a processor that ignored the shutdown,
        an outcome that could not be written) go back to pending in the same
        transaction, as :meth:`register_worker` releases them (attempts unchanged, the
        started mark kept, ``recovered`` set). Returns their ids, ascending.
        """

    async def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Running jobs whose worker's heartbeat is older than the kind's TTL (``ttls``,
        else ``default_ttl``), or whose worker row is gone, go back to pending (attempts
        and claims unchanged, claim cleared, ``recovered`` set, ``[stale-claim recovered]``
        in last_error);
        those with no attempt left go to dead instead, keeping the claim they died with
        (``recovered`` and the mark set all the same). Returns the ids of both. Audit:
        ``job_dlq`` per job moved to dead (recoveries to pending are not audited).

        Then deletes the rows of workers whose heartbeat is older than the largest of
        ``default_ttl`` and every ``ttls`` value (their jobs were all recovered just
        now); such a worker, if it still lives, gets None from its next
        :meth:`heartbeat`. Meant to run on one node per period (see
        :meth:`try_maintenance`).
        """
        ...

    async def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` (None: any) that is not
        due yet falls due, or None if there is none: the worker's next-due timer (see
        docs/worker-internals.md, "The worker"). Jobs due already are the claim's business.
        A cheap, bounded read; it may answer with an earlier time than the job's (never a
        later one), after which the worker asks again."""
        ...

    def notifier(self) -> AsyncNotifier | None:
        """A notifier woken by this store's writes, or None (the worker polls)."""
        ...


class AsyncAdminRole(Protocol):
    """Admin changes: operator transitions and deletion of jobs."""

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Operator transition (CANCEL, MARK_FAILED, REPLAY) of every matching job whose
        state allows ``event`` (``skiplock.core.sources``); returns the changed ids.
        Audit: ``skiplock.core.operator_action(event)`` per job changed, details from
        ``skiplock.core.operator_details``.

        REPLAY makes the job due now, clears the claim, and with ``reset_attempts`` sets
        attempts to 0; ``claims`` is never reset, so leases of earlier claims stay stale.
        CANCEL and MARK_FAILED of a running job leave its worker's lease stale: the
        worker learns it from :meth:`heartbeat`. Wakes workers.
        """
        ...

    async def apply_job(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> Job | None:
        """:meth:`apply` of the one job ``job_id``, returning it as it is after the change
        (as :meth:`get` then reads it, ``result`` and ``errors`` included), read in the
        same operation as the change; None, and nothing changed, if there is no such job
        or its state does not allow ``event``. Audited and otherwise as :meth:`apply`."""
        ...

    async def delete(
        self, filter: JobFilter, *, connection: Any = None, audit: AsyncAudit | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running; returns what was deleted.
        Audit: ``job_discard`` per job deleted (details: its state and payload)."""
        ...


class AsyncUpkeepRole(Protocol):
    """Upkeep: roll-ups, retention and the cluster-wide maintenance lease."""

    async def roll_up_counts(self) -> int:
        """Fold the store's bookkeeping behind :meth:`counts`, :meth:`health_snapshot` and
        :meth:`finished_counts` so they stay cheap; never changes what they return. Also
        takes this minute's :meth:`queue_samples` if nobody has. Returns
        how many entries it folded (0 for a store with nothing to fold, or while another
        session folds). Workers call it every second (``skiplock.engine.worker``)."""
        ...

    async def try_maintenance(self, name: str, every: timedelta) -> bool:
        """Take the right to run maintenance task ``name`` now, cluster-wide.

        Atomically: True (and the task counts as run at the store's now) if ``name`` has
        not run within ``every`` — its last run is at or before ``now - every``, or it
        never ran — else False. Of concurrent callers for one period exactly one gets
        True (J13); names are independent. ``every <= 0`` always grants.
        """
        ...

    async def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        """Delete (or archive) succeeded jobs completed more than ``older_than`` ago, in
        batches of ``batch_size``; returns the number of jobs. Audit events stay (their
        retention is :meth:`purge_audit`'s).

        With ``key_window`` the purged jobs' idempotency keys are remembered: an enqueue
        with one creates nothing and returns the purged job's id with ``purged=True``.
        Keys remembered more than ``key_window`` ago (without it: every one) are
        forgotten by the same call (a SQL store: up to ``batch_size`` per batch).
        """
        ...

    async def purge_audit(self, *, older_than: timedelta, batch_size: int) -> int:
        """Delete the store's audit events recorded more than ``older_than`` ago, oldest
        first, in batches of ``batch_size`` (each its own short transaction, bounded by
        the batch, not by the table); returns how many. A store without an audit table
        returns 0."""
        ...


class AsyncJobStore(
    AsyncJobsRole,
    AsyncWorkersRole,
    AsyncControlsRole,
    AsyncReadsRole,
    AsyncAdminRole,
    AsyncUpkeepRole,
    Protocol,
):
    """Where jobs live: every role at once, what the whole engine runs on.
    Implementations: memory, psycopg, asyncpg, SQLAlchemy, yours. A part of the engine
    takes only the roles it uses (a read-only store: :class:`AsyncReadsRole`).

    Every method that changes a job's state after its claim is *fenced* by the job's
    :class:`~skiplock.core.Lease`: it applies only while the job is running under the
    lease's worker with ``claims == lease.claim``; a mismatch changes nothing.

    Audit (J10): with ``audit=AsyncAudit(actor, sink)`` a method records one
    :class:`~skiplock.core.AuditEvent` per job it changes in an audited way (the
    :class:`~skiplock.core.AuditAction` of each method is named there), with
    ``audit.actor``, in the same transaction as the change: a change rolled back leaves
    no event. Without a sink the events go to the store's own audit table (read by
    :meth:`audit_trail`); with one the store calls ``sink.record(events, connection)``
    before the change's transaction ends. If the sink raises, a change the caller asked
    for (``enqueue``, ``apply``, ``apply_job``, ``delete``) is undone (in the caller's
    transaction, back to where the call began) and the error propagates; a worker's or
    maintenance's change (``claim``, ``complete``, ``recover_stale``) is kept, the sink's
    own writes are undone and the error is logged (``skiplock.audit``).
    """

    async def close(self) -> None:
        """Release pools and connections."""
