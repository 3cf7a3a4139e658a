"""The engine: processor registry, enqueue and admin operations (async source).

``_engine.py`` is its generated sync twin (``Engine``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from skiplock._compat_async import IS_ASYNC
from skiplock.core import (
    EnqueueResult,
    KindPolicy,
    RateLimit,
    ValidationError,
)
from skiplock.ports import (
    AsyncAudit,
    AsyncAuditSink,
    AsyncCallbackAuditSink,
    NoopMetrics,
    NoopTracer,
    SystemClock,
)

from ._admin_async import AsyncAdminOps
from ._enqueue import Enqueue, build_request
from ._limits import NodeSlots, RateLimiter
from ._maintenance_async import Maintenance
from ._registry import (
    Processor,
    ProcessorSpec,
    Registry,
    build_spec,
    check_kind,
    make_overrides,
    overrides_of,
)
from ._settings import Settings
from ._worker_async import AsyncWorker, WorkerParts

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from skiplock.ports import AsyncJobStore, Clock, Metrics, Tracer

#: At most this many resolved policies of kinds without a processor are kept.
_POLICY_CACHE_SIZE = 1024

F = TypeVar("F", bound=Callable[..., Any])
P = TypeVar("P", bound=Processor)


class AsyncEngine(AsyncAdminOps):
    """An application's handle on skiplock: processors, enqueue, admin operations, workers.

    ``store`` is any :class:`~skiplock.ports.AsyncJobStore`; ``clock`` drives rate limits
    (the store keeps its own clock for due times); ``metrics``/``tracer`` default to no-ops.
    An engine without processors is an enqueue-only node.

    The audit trail (J10) is off unless ``Settings.audit`` is on (events go to the
    store's audit table) or ``audit_sink`` is given (an
    :class:`~skiplock.ports.AsyncAuditSink`, or a function ``(events, connection)``
    wrapped in :class:`~skiplock.ports.AsyncCallbackAuditSink`; events go to it instead).
    """

    def __init__(
        self,
        store: AsyncJobStore,
        settings: Settings | None = None,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
        audit_sink: AsyncAuditSink | Callable[..., object] | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"settings must be skiplock.Settings, got {type(settings).__name__}")
        self._store = store
        self._settings = settings if settings is not None else Settings()
        sink = _audit_sink(audit_sink)
        # The audit of changes made without an actor (J10); None: no audit trail.
        self._audit: AsyncAudit | None = None
        if self._settings.audit or sink is not None:
            self._audit = AsyncAudit(actor=self._settings.audit_actor, sink=sink)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics: Metrics = metrics if metrics is not None else NoopMetrics()
        self._tracer: Tracer = tracer if tracer is not None else NoopTracer()
        self._registry = Registry()
        # Token buckets and node limits of every worker of this engine in this process
        # (J6): a node is a process.
        self._rate_limiter = RateLimiter()
        self._node_slots = NodeSlots()
        self._maintenance = Maintenance(store, self._settings, self.stale_ttls, self._audit)
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
    def audit(self) -> AsyncAudit | None:
        """How changes are audited (J10): the sink (None: the store's audit table) and
        the actor of changes without one; None while the audit trail is off."""
        return self._audit

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
        if self._audit is None:
            return await self._store.enqueue(requests, connection=connection)
        return await self._store.enqueue(requests, connection=connection, audit=self._audit)

    def _default_max_attempts(self, kind: object) -> int:
        if isinstance(kind, str):
            return self.policy(kind).retry.max_attempts
        return self._settings.max_attempts

    # ---- maintenance (J13) ----------------------------------------------------------

    async def maintain(self, *, once_per_period: bool = False) -> tuple[list[int], int]:
        """One maintenance run: stale-claim recovery (R12) and retention (R26).

        Returns the recovered job ids and the number of purged jobs. Called explicitly it
        runs both at once. Workers call it every ``maintenance_interval`` with
        ``once_per_period=True``: each task then runs only if no node ran it within the
        last ``maintenance_interval`` (``store.try_maintenance``, J13), so a cluster does
        the work once per period however many workers it has.
        """
        return await self._maintenance.run(once_per_period=once_per_period)

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
        parts = WorkerParts(
            store=self._store,
            settings=self._settings,
            processors=self.processors,
            policy=self.policy,
            limiter=self._rate_limiter,
            node_slots=self._node_slots,
            maintenance=self._maintenance,
            clock=self._clock,
            metrics=self._metrics,
            tracer=self._tracer,
            audit=self._audit,
        )
        return AsyncWorker(
            parts,
            concurrency=concurrency,
            kinds=kinds,
            tenants=tenants,
            all_kinds=all_kinds,
            worker_id=worker_id,
            install_signal_handlers=install_signal_handlers,
        )


def _audit_sink(sink: object) -> AsyncAuditSink | None:
    """An audit sink as given to the engine: a sink, a callback wrapped in one, or None."""
    if sink is None:
        return None
    if callable(getattr(sink, "record", None)):
        return cast("AsyncAuditSink", sink)
    if callable(sink):
        return AsyncCallbackAuditSink(sink)
    raise TypeError(
        f"audit_sink must be an audit sink (with a record method) or a function, "
        f"got {type(sink).__name__}"
    )
