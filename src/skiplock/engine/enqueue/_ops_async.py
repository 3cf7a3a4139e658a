"""The engine's enqueue API (async source; ``_ops.py`` is the sync twin): one
job now, at a time or after a delay, many in one call (X1), and periodic schedules, a job
at every tick (see docs/periodic.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from .._inputs import Enqueue
from .._observe import PublishSpan
from .._registry import check_kind
from ..periodic._rules import CatchUp, build_schedule

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime, timedelta, tzinfo

    from skiplock.core import EnqueueRequest, EnqueueResult
    from skiplock.ports import AsyncAudit, AsyncJobsRole, Clock, Tracer

    from .._inputs import EnqueueOptions, JobOptions
    from ..periodic._rules import ScheduleInfo, TickResult
    from ..periodic._scheduler_async import Scheduler
    from ._intake import Intake, RequestBuilder

F = TypeVar("F", bound=Callable[..., Any])


class AsyncEnqueueOps:
    """The enqueue API, mixed into :class:`AsyncEngine` and
    :class:`~._operator_async.AsyncOperator` (each provides the store, the audit of its
    changes, the tracer and the intake that validates requests)."""

    _store: AsyncJobsRole
    _audit: AsyncAudit | None
    _tracer: Tracer
    _traced: bool
    _intake: Intake

    # ---- enqueue --------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        available_at: datetime | None = None,
        delay: timedelta | float | None = None,
        connection: Any = None,
        **options: Unpack[JobOptions],
    ) -> EnqueueResult:
        """Create one job; joins ``connection``'s transaction when given (R0).

        ``options`` are the job's own (:class:`~skiplock.JobOptions`: ``priority``,
        ``tenant``, ``idempotency_key``, ``max_attempts``, ``idempotency_scope``,
        ``idempotency_conflict``, ``concurrency_key``, ``concurrency_limit``; all the job
        options are declared once, :class:`~skiplock.core.EnqueueFields`).
        ``priority`` ``None`` takes the kind's declared default (0 if none). The job is
        due now, at ``available_at`` (a timezone-aware datetime) or ``delay``
        (a timedelta or seconds) after the store's now; the two are mutually exclusive
        (R18). Raises :class:`~skiplock.ValidationError` (or ``UnknownKindError``) before
        anything is written (X2). An existing ``idempotency_key`` returns the existing
        job's id with ``created=False``: unique among all jobs or, with
        ``idempotency_scope="tenant"``, among the tenant's; with
        ``idempotency_conflict="replace_pending"`` a still-pending existing job takes this
        payload, due time and priority (``replaced=True``). ``None`` takes the kind's
        policy. A key whose job retention purged within ``Settings.idempotency_retention``
        returns that job's id with ``purged=True`` (docs/keys.md, "Idempotency keys").
        At most ``concurrency_limit`` (default 1) jobs of ``concurrency_key`` run at once,
        across kinds and workers; ``None`` takes the kind's declared key, if any
        (docs/keys.md, "Concurrency keys").
        """
        if not self._traced:  # by keyword: no Enqueue per call
            request = self._intake.builder().request_of(
                kind, payload, available_at, delay, **options
            )
            results = await self._write([request], connection)
            return results[0]
        item = Enqueue(kind, payload, available_at=available_at, delay=delay, **options)
        results = await self._enqueue(lambda builder: [builder.request(item)], [item], connection)
        return results[0]

    async def enqueue_at(
        self, when: datetime, kind: str, payload: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Create one job that is not claimed before ``when`` (a timezone-aware datetime);
        ``options`` as for :meth:`enqueue` (:class:`~skiplock.EnqueueOptions`)."""
        return await self.enqueue(kind, payload, available_at=when, **options)

    async def enqueue_after(
        self,
        delay: timedelta | float,
        kind: str,
        payload: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Create one job due ``delay`` (timedelta or seconds) after the store's now;
        ``options`` as for :meth:`enqueue` (:class:`~skiplock.EnqueueOptions`)."""
        return await self.enqueue(kind, payload, delay=delay, **options)

    async def enqueue_many(
        self, items: Iterable[Enqueue], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Create many jobs in one store call, all or none (X1); results in input order.

        Every item is validated first; a bad one raises (naming its index) and nothing
        is written.
        """
        listed = list(items)
        if not listed:
            return []
        return await self._enqueue(lambda builder: builder.requests(listed), listed, connection)

    async def _enqueue(
        self,
        build: Callable[[RequestBuilder], Sequence[EnqueueRequest]],
        items: Sequence[object],
        connection: Any,
    ) -> list[EnqueueResult]:
        """Write the requests ``build`` makes of ``items`` (raising before anything is
        written); with a tracer in a producer span over their kinds (as given)."""
        if not self._traced:
            return await self._write(build(self._intake.builder()), connection)
        # R3: a producer span around the call; its context is stored with every job.
        kinds = [getattr(item, "kind", None) for item in items]
        span = PublishSpan(self._tracer, [kind if isinstance(kind, str) else "" for kind in kinds])
        error: BaseException | None = None
        try:
            requests = build(self._intake.builder(span.context))
            results = await self._write(requests, connection)
            span.published(results)
            return results
        except BaseException as exc:
            error = exc
            raise
        finally:
            span.close(error)

    async def _write(
        self, requests: Sequence[EnqueueRequest], connection: Any
    ) -> list[EnqueueResult]:
        """``store.enqueue``, audited (J10) when the audit trail is on."""
        return await self._store.enqueue(requests, connection=connection, audit=self._audit)


class AsyncScheduleOps:
    """Periodic schedules, mixed into :class:`AsyncEngine` (it provides the intake, the
    scheduler and the clock)."""

    _intake: Intake
    _scheduler: Scheduler
    _clock: Clock

    def periodic(
        self,
        kind: str,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | tzinfo | None = None,
        payload: Any = None,
        priority: int | None = None,
        tenant: str | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
        catch_up: CatchUp = "latest",
    ) -> Callable[[F], F]:
        """Declare a schedule: a job of ``kind`` at every tick (see docs/periodic.md).

        Exactly one of ``cron`` (a cron expression, evaluated in UTC unless ``tz`` names a
        zoneinfo zone; needs the ``cron`` extra) and ``every`` (a timedelta or seconds, at
        least 1 s; ticks at whole multiples of it since the Unix epoch). Each tick's job
        has ``payload``, ``priority``, ``tenant`` and ``max_attempts`` as for
        :meth:`enqueue`, is due at its tick, and carries the idempotency key
        ``periodic:<name>:<tick, UTC ISO 8601>``, so any number of workers create one
        job per tick. ``name`` (default: ``kind``) must be unique in the engine.

        ``catch_up`` says which ticks missed while no scheduler ran are enqueued:
        ``"latest"`` (default) only the most recent, ``"skip"`` none, an int N up to the
        N most recent (at most 1000). Ticks older than ``Settings.retention`` are never
        enqueued.

        Every argument is checked now (:class:`~skiplock.ValidationError`); whether the
        kind may be enqueued (``Settings.unknown_kinds``) is checked by :meth:`worker`. Workers
        started by :meth:`worker` run the schedules; :meth:`enqueue_due_ticks` runs one
        pass by hand. Returns a decorator that returns its function unchanged, so it
        may also sit on top of the kind's processor.
        """
        item = Enqueue(kind, payload, priority=priority, tenant=tenant, max_attempts=max_attempts)
        check_kind(kind)
        self._intake.requests([item], check_kinds=False)  # payload, priority, tenant, attempts
        now = self._clock.now()
        schedule = build_schedule(
            kind, cron=cron, every=every, tz=tz, name=name, catch_up=catch_up, item=item, now=now
        )
        self._scheduler.add(schedule)

        def decorate(fn: F) -> F:
            return fn

        return decorate

    async def schedules(self) -> list[ScheduleInfo]:
        """The declared schedules (declaration order): when each ticks, its next tick
        (from the store's now), and the last tick this process enqueued with its job id."""
        return await self._scheduler.infos()

    async def enqueue_due_ticks(self) -> list[TickResult]:
        """One scheduler pass: enqueue every schedule's due ticks now (as a worker's
        scheduler loop does); returns them, ``created=False`` for ticks whose job existed.

        A schedule whose enqueue fails is logged and retried by the next pass.
        """
        results, _ = await self._scheduler.run_pass()
        return results
