"""The engine: processor registry, enqueue and admin operations (async source).

``_engine.py`` is its generated sync twin (``Engine``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from skiplock._compat_async import IS_ASYNC
from skiplock.core import (
    EnqueueResult,
    Event,
    InvalidTransitionError,
    Job,
    JobFilter,
    JobNotFoundError,
    JobState,
    KindPolicy,
    Page,
    RateLimit,
    StateCount,
    ValidationError,
    transition,
)
from skiplock.ports import NoopMetrics, NoopTracer, SystemClock

from ._enqueue import Enqueue, as_names, as_states, build_request
from ._limits import RateLimiter
from ._registry import (
    Processor,
    ProcessorSpec,
    Registry,
    build_spec,
    check_int,
    check_kind,
    make_overrides,
    overrides_of,
)
from ._settings import Settings
from ._worker_async import AsyncWorker

if TYPE_CHECKING:
    from datetime import datetime

    from skiplock.ports import AsyncJobStore, Clock, Metrics, Tracer

#: Succeeded jobs purged per batch by maintenance.
PURGE_BATCH = 1000
#: At most this many resolved policies of kinds without a processor are kept.
_POLICY_CACHE_SIZE = 1024

F = TypeVar("F", bound=Callable[..., Any])
P = TypeVar("P", bound=Processor)


class AsyncEngine:
    """An application's handle on skiplock: processors, enqueue, admin operations, workers.

    ``store`` is any :class:`~skiplock.ports.AsyncJobStore`; ``clock`` drives rate limits
    (the store keeps its own clock for due times); ``metrics``/``tracer`` default to no-ops.
    An engine without processors is an enqueue-only node.
    """

    def __init__(
        self,
        store: AsyncJobStore,
        settings: Settings | None = None,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"settings must be skiplock.Settings, got {type(settings).__name__}")
        self._store = store
        self._settings = settings if settings is not None else Settings()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics: Metrics = metrics if metrics is not None else NoopMetrics()
        self._tracer: Tracer = tracer if tracer is not None else NoopTracer()
        self._registry = Registry()
        # Token buckets of every worker of this engine in this process (J6).
        self._rate_limiter = RateLimiter()
        # Resolved policies of kinds without a processor here (Settings is frozen, so
        # only a registration can change them): resolving builds and validates new
        # policy objects, far too slow to repeat for every enqueued job.
        self._policies: dict[str, KindPolicy] = {}

    # ---- accessors ------------------------------------------------------------------

    @property
    def store(self) -> AsyncJobStore:
        """The job store."""
        return self._store

    @property
    def settings(self) -> Settings:
        """The settings."""
        return self._settings

    @property
    def clock(self) -> Clock:
        """The application clock (rate limits, durations)."""
        return self._clock

    @property
    def metrics(self) -> Metrics:
        """The metrics sink."""
        return self._metrics

    @property
    def tracer(self) -> Tracer:
        """The tracer."""
        return self._tracer

    @property
    def processors(self) -> dict[str, ProcessorSpec]:
        """Registered processors by kind (a copy)."""
        return dict(self._registry.specs)

    @property
    def kinds(self) -> frozenset[str]:
        """Kinds with a processor in this engine."""
        return frozenset(self._registry.specs)

    @property
    def known_kinds(self) -> frozenset[str]:
        """Kinds with a processor plus kinds declared with :meth:`declare_kind`."""
        return self._registry.known_kinds()

    def policy(self, kind: str) -> KindPolicy:
        """The resolved policy of ``kind`` (explicit config > processor > global)."""
        spec = self._registry.get(kind)
        if spec is not None:
            return spec.policy
        policy = self._policies.get(kind)
        if policy is None:
            policy = self._settings.policy_for(kind, None)
            if len(self._policies) < _POLICY_CACHE_SIZE:  # bounded: kinds come from callers
                self._policies[kind] = policy
        return policy

    # ---- registration ---------------------------------------------------------------

    def processor(
        self,
        kind: str,
        *,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        transactional: bool | None = None,
        autocommit: bool | None = None,
        node_limit: int | None = None,
        cluster_limit: int | None = None,
        rate_limit: RateLimit | None = None,
        provider: str | None = None,
        backoff_base: timedelta | float | None = None,
        backoff_factor: float | None = None,
        backoff_cap: timedelta | float | None = None,
        backoff_jitter: float | None = None,
        stale_ttl: timedelta | float | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the processor of ``kind``.

        The function takes ``(payload, ctx)`` (or just ``payload``); the payload
        parameter's annotation selects the decoded type (R25). Keywords are the
        processor's policy defaults; ``Settings.kinds`` overrides them.

        Connection mode (R10): ``transactional=True`` runs the processor inside the job's
        transaction (``ctx.connection``; its writes commit with the completion),
        ``autocommit=True`` gives it an autocommit connection, and by default it gets
        none (``ctx.connection is None``). Both True is a ValidationError.
        ``rate_limit`` is a token bucket per process, shared by this engine's workers
        there (divide a cluster-wide limit by the number of worker processes).
        """
        check_kind(kind)
        overrides = make_overrides(
            max_attempts=max_attempts,
            timeout=timeout,
            transactional=transactional,
            autocommit=autocommit,
            node_limit=node_limit,
            cluster_limit=cluster_limit,
            rate_limit=rate_limit,
            backoff_base=backoff_base,
            backoff_factor=backoff_factor,
            backoff_cap=backoff_cap,
            backoff_jitter=backoff_jitter,
            stale_ttl=stale_ttl,
        )

        def decorate(fn: F) -> F:
            self._add(build_spec(kind, fn, overrides, provider, self._settings))
            return fn

        return decorate

    def register(self, processor: P | type[P]) -> P:
        """Register a class-style :class:`~skiplock.Processor` (an instance or its class)."""
        instance = processor() if isinstance(processor, type) else processor
        if not isinstance(instance, Processor):
            raise TypeError(f"expected a skiplock.Processor, got {type(instance).__name__}")
        kind = getattr(type(instance), "kind", None)
        if kind is None:
            raise TypeError(f"{type(instance).__name__} must set the class attribute 'kind'")
        spec = build_spec(
            kind, instance.process, overrides_of(instance), type(instance).provider, self._settings
        )
        self._add(spec)
        return instance

    def _add(self, spec: ProcessorSpec) -> None:
        if IS_ASYNC:
            policy = spec.policy
            if not spec.is_async and (policy.transactional or policy.autocommit):
                mode = "transactional" if policy.transactional else "autocommit"
                raise TypeError(
                    f"processor for {spec.kind!r} is a plain function: an AsyncEngine runs "
                    "sync processors in a thread, where its async connections are of no "
                    f"use; register it without {mode}=True, or make it async"
                )
        elif spec.is_async:
            raise TypeError(
                f"processor for {spec.kind!r} is async: a sync Engine cannot run it; "
                "use AsyncEngine, or make it a plain function"
            )
        self._registry.add(spec)
        self._policies.pop(spec.kind, None)

    def declare_kind(self, kind: str) -> None:
        """Accept enqueues of ``kind`` although it is processed elsewhere."""
        self._registry.declare(kind)

    # ---- enqueue --------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        priority: int = 0,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        available_at: datetime | None = None,
        delay: timedelta | float | None = None,
        connection: Any = None,
    ) -> EnqueueResult:
        """Create one job; joins ``connection``'s transaction when given (R0).

        The job is due now, at ``available_at`` (a timezone-aware datetime) or ``delay``
        (a timedelta or seconds) after the store's now; the two are mutually exclusive
        (R18). Raises :class:`~skiplock.ValidationError` (or ``UnknownKindError``) before
        anything is written (X2). An existing ``idempotency_key`` returns the existing
        job's id with ``created=False``.
        """
        item = Enqueue(
            kind,
            payload,
            priority=priority,
            tenant=tenant,
            idempotency_key=idempotency_key,
            available_at=available_at,
            delay=delay,
            max_attempts=max_attempts,
        )
        return (await self._enqueue([item], connection))[0]

    async def enqueue_at(
        self,
        when: datetime,
        kind: str,
        payload: Any = None,
        *,
        priority: int = 0,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        connection: Any = None,
    ) -> EnqueueResult:
        """Create one job that is not claimed before ``when`` (a timezone-aware datetime)."""
        return await self.enqueue(
            kind,
            payload,
            priority=priority,
            tenant=tenant,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            available_at=when,
            connection=connection,
        )

    async def enqueue_after(
        self,
        delay: timedelta | float,
        kind: str,
        payload: Any = None,
        *,
        priority: int = 0,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        connection: Any = None,
    ) -> EnqueueResult:
        """Create one job due ``delay`` (timedelta or seconds) after the store's now."""
        return await self.enqueue(
            kind,
            payload,
            priority=priority,
            tenant=tenant,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            delay=delay,
            connection=connection,
        )

    async def enqueue_many(
        self, items: Iterable[Enqueue], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Create many jobs in one store call, all or none (X1); results in input order.

        Every item is validated first; a bad one raises (naming its index) and nothing
        is written.
        """
        return await self._enqueue(list(items), connection)

    async def _enqueue(self, items: Sequence[Enqueue], connection: Any) -> list[EnqueueResult]:
        if not items:
            return []
        known = self._registry.known_kinds()
        known_kinds = known if known and self._settings.strict_kinds else None
        trace = self._tracer.inject()
        max_payload_bytes = self._settings.max_payload_bytes
        defaults: dict[object, int] = {}
        requests = []
        for index, item in enumerate(items):
            kind = getattr(item, "kind", None)
            default = defaults.get(kind) if isinstance(kind, str) else None
            if default is None:
                default = self._default_max_attempts(kind)
                if isinstance(kind, str):
                    defaults[kind] = default
            try:
                request = build_request(
                    item,
                    default_max_attempts=default,
                    trace_context=trace,
                    known_kinds=known_kinds,
                    max_payload_bytes=max_payload_bytes,
                )
            except ValidationError as exc:
                if len(items) == 1:
                    raise
                raise type(exc)(f"item {index}: {exc}") from None
            requests.append(request)
        return await self._store.enqueue(requests, connection=connection)

    def _default_max_attempts(self, kind: object) -> int:
        if isinstance(kind, str):
            return self.policy(kind).retry.max_attempts
        return self._settings.max_attempts

    # ---- admin (R13 / J8) -----------------------------------------------------------

    async def get_job(self, job_id: int) -> Job:
        """One job (with ``last_error`` and attempts); JobNotFoundError if absent."""
        job = await self._store.get(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job

    async def list_jobs(
        self,
        *,
        state: JobState | str | Iterable[JobState | str] | None = None,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        priority_min: int | None = None,
        priority_max: int | None = None,
        limit: int = 100,
        after_id: int | None = None,
        descending: bool = False,
    ) -> list[Job]:
        """Jobs matching every given filter, ordered by id, one keyset page.

        Pass the last id of a page as ``after_id`` for the next one (with ``descending``
        the next page holds smaller ids).
        """
        check_int("limit", limit, minimum=1)
        for name, value in (("priority_min", priority_min), ("priority_max", priority_max)):
            if value is not None:
                check_int(name, value)
        job_filter = JobFilter(
            states=as_states(state),
            kinds=as_names("kind", kind),
            tenants=as_names("tenant", tenant),
            priority_min=priority_min,
            priority_max=priority_max,
        )
        page = Page(limit=limit, after_id=after_id, descending=descending)
        return await self._store.list_jobs(job_filter, page)

    async def dead_jobs(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        limit: int = 100,
        after_id: int | None = None,
    ) -> list[Job]:
        """The dead-letter view: dead jobs with their last_error, payload and tenant."""
        return await self.list_jobs(
            state=JobState.DEAD, kind=kind, tenant=tenant, limit=limit, after_id=after_id
        )

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant)."""
        return await self._store.counts()

    async def retry_job(self, job_id: int, *, reset_attempts: bool = False) -> Job:
        """Replay a dead, failed or cancelled job: pending and due now."""
        return await self._apply_one(job_id, Event.REPLAY, reset_attempts=reset_attempts)

    async def retry_dead(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        reset_attempts: bool = True,
    ) -> list[int]:
        """Replay every dead job matching the filter (J8: attempts reset); returns ids."""
        job_filter = JobFilter(
            states=frozenset({JobState.DEAD}),
            kinds=as_names("kind", kind),
            tenants=as_names("tenant", tenant),
        )
        return await self._store.apply(job_filter, Event.REPLAY, reset_attempts=reset_attempts)

    async def cancel_job(self, job_id: int) -> Job:
        """Cancel a job. A running one is asked to stop: its worker's next heartbeat
        interrupts the processor (``ctx.cancelled``, :class:`JobCancelledError`), and its
        result is discarded by fencing (R13)."""
        return await self._apply_one(job_id, Event.CANCEL)

    async def fail_job(self, job_id: int) -> Job:
        """Set the manual stop flag: ``failed``, never tried again unless replayed."""
        return await self._apply_one(job_id, Event.MARK_FAILED)

    async def delete_job(self, job_id: int) -> Job:
        """Delete a job that is not running; returns it as it was."""
        deleted = await self._store.delete(JobFilter(ids=frozenset({job_id})))
        if deleted:
            return deleted[0]
        job = await self.get_job(job_id)
        raise InvalidTransitionError(f"cannot delete job {job_id}: it is {job.state.value}")

    async def _apply_one(self, job_id: int, event: Event, *, reset_attempts: bool = False) -> Job:
        changed = await self._store.apply(
            JobFilter(ids=frozenset({job_id})), event, reset_attempts=reset_attempts
        )
        job = await self.get_job(job_id)
        if not changed:
            transition(job.state, event)  # raises with the allowed events named
            raise InvalidTransitionError(f"job {job_id} changed concurrently; try again")
        return job

    # ---- maintenance (J13) ----------------------------------------------------------

    async def maintain(self, *, once_per_period: bool = False) -> tuple[list[int], int]:
        """One maintenance run: stale-claim recovery (R12) and retention (R26).

        Returns the recovered job ids and the number of purged jobs. Called explicitly it
        runs both at once. Workers call it every ``maintenance_interval`` with
        ``once_per_period=True``: each task then runs only if no node ran it within the
        last ``maintenance_interval`` (``store.try_maintenance``, J13), so a cluster does
        the work once per period however many workers it has.
        """
        settings = self._settings
        every = timedelta(seconds=settings.maintenance_interval)
        recovered: list[int] = []
        if not once_per_period or await self._store.try_maintenance("recover", every):
            recovered = await self._store.recover_stale(
                default_ttl=settings.stale_ttl, ttls=self.stale_ttls()
            )
        purged = 0
        if settings.retention is not None and (
            not once_per_period or await self._store.try_maintenance("purge", every)
        ):
            purged = await self._store.purge(
                older_than=settings.retention,
                archive=settings.retention_archive,
                batch_size=PURGE_BATCH,
            )
        return recovered, purged

    def stale_ttls(self) -> dict[str, timedelta]:
        """Per-kind stale TTLs that differ from ``Settings.stale_ttl``."""
        kinds = self._registry.known_kinds() | frozenset(self._settings.kinds)
        ttls = {kind: self.policy(kind).stale_ttl for kind in kinds}
        return {k: v for k, v in ttls.items() if v != self._settings.stale_ttl}

    # ---- workers --------------------------------------------------------------------

    def worker(
        self,
        *,
        concurrency: int | None = None,
        kinds: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        all_kinds: bool = False,
        worker_id: str | None = None,
        install_signal_handlers: bool = True,
    ) -> AsyncWorker:
        """A worker for this engine's processors (see :class:`AsyncWorker`)."""
        return AsyncWorker(
            self,
            concurrency=concurrency,
            kinds=kinds,
            tenants=tenants,
            all_kinds=all_kinds,
            worker_id=worker_id,
            install_signal_handlers=install_signal_handlers,
        )
