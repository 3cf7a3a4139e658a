"""The engine: processor registry, enqueue and admin operations (async source;
``_engine.py`` is its generated sync twin, ``Engine``).

The enqueue API and periodic schedules are mixed in from ``enqueue/_ops_async.py``, the
admin API from ``admin/_admin_async.py`` (both also make up the operator handle,
``_operator_async.py``); what enqueue accepts (each kind's policy, validated requests)
comes from ``enqueue/_intake.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, TypeVar, Unpack, cast, overload

from skiplock._compat_async import IS_ASYNC
from skiplock.core.rules import EffectiveLimits, kind_limits
from skiplock.ports import (
    AsyncAudit,
    AsyncAuditSink,
    AsyncCallbackAuditSink,
    NoopMetrics,
    NoopTracer,
    SystemClock,
)

from ._controls import ControlsCache
from ._declaration import TaskDef, TaskOptions, declare
from ._limits import NodeSlots, RateLimiter
from ._maintenance_async import Maintenance
from ._observe import traces
from ._operator_async import AsyncOperator
from ._registry import (
    Processor,
    ProcessorSpec,
    Registry,
    build_spec,
    declaration_of,
    typed_by,
)
from .admin._controls_async import AsyncControlOps
from .admin._reads_async import AsyncReader
from .enqueue._intake import Intake
from .enqueue._ops_async import AsyncEnqueueOps, AsyncScheduleOps
from .enqueue._task_async import AsyncTask
from .periodic._scheduler_async import Scheduler
from .settings._settings import Settings
from .worker._parts_async import WorkerParts
from .worker._worker_async import AsyncWorker

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import timedelta

    from skiplock.core import KindPolicy
    from skiplock.core.store import Controls, RateTable
    from skiplock.ports import AsyncJobStore, AsyncReadsRole, Clock, Metrics, Tracer

    from ._inputs import WorkerOptions

F = TypeVar("F", bound=Callable[..., Any])
P = TypeVar("P", bound=Processor)
#: A task's payload type.
T = TypeVar("T")


class AsyncEngine(AsyncEnqueueOps, AsyncScheduleOps, AsyncControlOps):
    """An application's handle on skiplock: processors, enqueue, admin operations, workers.

    ``store`` is any :class:`~skiplock.ports.AsyncJobStore`; ``clock`` drives rate limits
    (the store keeps its own clock for due times); ``metrics``/``tracer`` default to no-ops.
    An engine without processors is an enqueue-only node; one that declares its kinds
    (:meth:`declare`) refuses the kinds it does not know (``Settings.unknown_kinds``).

    ``reads`` is the store the operator reads of the doors go to (:meth:`reader`): a
    store over a hot standby (docs/replicas.md; it needs only the reads role,
    :class:`~skiplock.ports.AsyncReadsRole`). Without it they read ``store``. Everything
    else stays on ``store``: enqueue, workers, every change, the reads a change makes,
    and the engine's own read methods (an application reads its own writes).

    The audit trail (J10) is off unless ``Settings.audit`` is on (events go to the
    store's audit table) or ``audit_sink`` is given (an
    :class:`~skiplock.ports.AsyncAuditSink`, or a function ``(events, connection)``
    wrapped in :class:`~skiplock.ports.AsyncCallbackAuditSink`; events go to it instead).

    ``claim_errors=True``: its workers claim each job with its earlier attempts' errors
    (``ctx.job.errors``, as :meth:`~skiplock.ports.AsyncJobStore.get` reads them), for
    processors that report them; by default a claim leaves them out (it reads less).
    """

    # Every role: the mixins each take the roles they use (docs/architecture.md).
    _store: AsyncJobStore

    def __init__(
        self,
        store: AsyncJobStore,
        settings: Settings | None = None,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
        audit_sink: AsyncAuditSink | Callable[..., object] | None = None,
        claim_errors: bool = False,
        reads: AsyncReadsRole | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"settings must be skiplock.Settings, got {type(settings).__name__}")
        self._store = store
        self._reads = reads
        self._settings = settings if settings is not None else Settings()
        self._audit_sink = _audit_sink(audit_sink)
        self._claim_errors = claim_errors
        # The audit of changes made without an actor (J10); None: no audit trail.
        self._audit = self._audit_of(self._settings)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics: Metrics = metrics if metrics is not None else NoopMetrics()
        self._tracer: Tracer = tracer if tracer is not None else NoopTracer()
        self._traced = traces(self._tracer)
        self._registry = Registry()
        self._intake = self._kind_check = Intake(self._registry, self._settings)
        # Token buckets and node limits of every worker of this engine in this process
        # (J6): a node is a process.
        self._rate_limiter = RateLimiter()
        self._node_slots = NodeSlots()
        # The store's pauses and limits as this process's workers last read them.
        self._controls_cache = ControlsCache()
        self._controls = self._controls_cache
        self._maintenance = Maintenance(store, self._settings, self.stale_ttls, self._audit)
        self._scheduler = Scheduler(
            store,
            self._intake.requests,
            lambda: self._settings.retention,
            audit=lambda: self._audit,
        )

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
    def reads_store(self) -> AsyncReadsRole | None:
        """The store :meth:`reader` reads (a hot standby's), or None: it reads
        :attr:`store`."""
        return self._reads

    def reader(self) -> AsyncReader:
        """The operator reads (jobs, counts, health, history...) over :attr:`reads_store`
        (the engine's ``reads=``), else over :attr:`store`: what the dashboard's pages,
        the REST API's GETs, the exporter and the ``skiplock`` command's reads use. Its
        health report knows this engine's kinds as :meth:`health` does. Cheap (one per
        request is fine); it takes the engine's settings as they are when it is made."""
        return _EngineReader(self)

    def configure(self, settings: Settings) -> None:
        """Replace the engine's settings, e.g. with ``Settings.from_env(base=...)``.

        Every processor's policy is resolved again (``kinds`` > processor > globals, R6):
        all or nothing, a ValidationError leaves the engine as it was. Enqueue,
        maintenance and workers built from now on use the new settings; workers built
        before keep theirs. ``skiplock worker`` calls it to apply ``SKIPLOCK_*`` on top of
        the engine's own settings (docs/configuration.md).
        """
        if not isinstance(settings, Settings):
            raise TypeError(f"settings must be skiplock.Settings, got {type(settings).__name__}")
        self._registry.resolve_again(lambda spec: settings.policy_for(spec.kind, spec.overrides))
        self._settings = settings
        self._audit = self._audit_of(settings)
        self._maintenance = Maintenance(self._store, settings, self.stale_ttls, self._audit)
        self._intake.configure(settings)

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

    def _audit_of(self, settings: Settings) -> AsyncAudit | None:
        if not settings.audit and self._audit_sink is None:
            return None
        return AsyncAudit(actor=settings.audit_actor, sink=self._audit_sink)

    @property
    def audit(self) -> AsyncAudit | None:
        """How changes are audited (J10): the sink (None: the store's audit table) and
        the actor of changes without one; None while the audit trail is off."""
        return self._audit

    def operator(self, actor: str | None = None) -> AsyncOperator:
        """A handle on the admin API and enqueue acting as ``actor``: the audit trail
        (J10) names it for every change made through the handle. Without ``actor`` it
        acts as ``Settings.audit_actor``. A bad actor (blank, over 255 characters, control
        characters) raises :class:`~skiplock.ValidationError`."""
        return AsyncOperator(
            self._store,
            self._settings,
            self._intake,
            self._tracer,
            self._audit,
            actor,
            controls=self._controls_cache,
        )

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
        """Kinds with a processor or a declaration (:meth:`declare`, :meth:`declare_kind`)."""
        return self._registry.known_kinds()

    @property
    def declarations(self) -> dict[str, TaskDef[Any]]:
        """Every kind this engine knows, with its declaration (a copy): those of
        :meth:`declare`, processors' implicit ones, and for a kind known only by
        :meth:`declare_kind` an untyped one without defaults (``skiplock.declare(kind)``).
        Its keys are :attr:`known_kinds`."""
        return dict(self._registry.declarations)

    def policy(self, kind: str) -> KindPolicy:
        """The resolved policy of ``kind``: ``Settings.kinds`` > the kind's declaration
        or processor > the global settings."""
        return self._intake.policy(kind)

    # ---- registration ---------------------------------------------------------------

    def processor(self, kind: str, **options: Unpack[TaskOptions]) -> Callable[[F], F]:
        """Register the decorated function as the processor of ``kind``; returns it as is
        (:meth:`task` returns a typed handle instead).

        The function takes ``(payload, ctx)`` (or just ``payload``); the payload
        parameter's annotation selects the decoded type (R25). Keywords
        (:class:`~skiplock.TaskOptions`) are the kind's policy defaults, its ``provider``
        and the default ``priority`` of its jobs; ``Settings.kinds`` overrides the policy.

        Connection mode (R10): ``transactional=True`` runs the processor inside the job's
        transaction (``ctx.connection``; its writes commit with the completion),
        ``autocommit=True`` gives it an autocommit connection, and by default it gets
        none (``ctx.connection is None``). Both True is a ValidationError.
        ``rate_limit`` is a token bucket per (kind, tenant) shared by every worker of
        the cluster (per process with ``Settings.rate_limit_scope="process"``);
        ``prefetch_limit`` bounds the kind's claimed jobs a worker holds unstarted.
        """
        declared = declare(kind, **options)  # checked now, not when a function comes

        def decorate(fn: F) -> F:
            self._bind(typed_by(declared, fn), fn)
            return fn

        return decorate

    @overload
    def task(
        self, declaration: TaskDef[T], /
    ) -> Callable[[Callable[Concatenate[T, ...], Any]], AsyncTask[T]]: ...
    @overload
    def task(
        self, kind: str, /, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[Concatenate[T, ...], Any]], AsyncTask[T]]: ...
    def task(
        self, kind: str | TaskDef[Any], /, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[..., Any]], AsyncTask[Any]]:
        """Register the decorated function as a processor and return its typed handle.

        ``@engine.task("email.welcome", max_attempts=5)`` declares the kind as
        :meth:`processor` does, the payload type taken from the function's annotation;
        ``@engine.task(welcome)`` binds the function to the declaration ``welcome``
        (:func:`~skiplock.declare`), whose payload type and defaults it takes (a
        function annotating another payload type is a TypeError). The handle enqueues
        typed payloads (:class:`AsyncTask`) and calls the function when called.
        """
        if isinstance(kind, TaskDef):
            if options:
                raise TypeError(
                    "engine.task(declaration) takes no options: the declaration carries "
                    "the kind's defaults"
                )
            declared: TaskDef[Any] = kind
        else:
            declared = declare(kind, **options)
        explicit = isinstance(kind, TaskDef)

        def decorate(fn: Callable[..., Any]) -> AsyncTask[Any]:
            declaration = declared if explicit else typed_by(declared, fn)
            self._bind(declaration, fn)
            return AsyncTask(self, declaration, fn)

        return decorate

    def register(self, processor: P | type[P]) -> P:
        """Register a class-style :class:`~skiplock.Processor` (an instance or its class)."""
        instance = processor() if isinstance(processor, type) else processor
        if not isinstance(instance, Processor):
            raise TypeError(f"expected a skiplock.Processor, got {type(instance).__name__}")
        if getattr(type(instance), "kind", None) is None:
            raise TypeError(f"{type(instance).__name__} must set the class attribute 'kind'")
        self._bind(declaration_of(instance), instance.process)
        return instance

    def _bind(self, declaration: TaskDef[Any], fn: Callable[..., Any]) -> None:
        self._add(build_spec(declaration, fn, self._settings), declaration)

    def _add(self, spec: ProcessorSpec, declaration: TaskDef[Any]) -> None:
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
        self._registry.add(spec, declaration)
        self._intake.forget(spec.kind)

    def declare(self, declaration: TaskDef[T]) -> AsyncTask[T]:
        """Know ``declaration``'s kind here and return its enqueue handle.

        For enqueue-only processes: jobs of the kind are written with the declaration's
        defaults (its ``priority``, and its ``max_attempts`` unless ``Settings.kinds``
        sets one), and the engine refuses kinds it does not know
        (``Settings.unknown_kinds``). Declaring an equal declaration again is a no-op; a
        different one for the same kind is a ValueError.
        """
        if not isinstance(declaration, TaskDef):
            raise TypeError(
                "engine.declare() takes a declaration from skiplock.declare(kind, type, ...); "
                f"got {declaration!r} (engine.declare_kind(kind) knows a bare kind name)"
            )
        self._settings.policy_for(declaration.kind, declaration.overrides)  # fails now
        self._registry.declare_task(declaration)
        self._intake.forget(declaration.kind)
        return AsyncTask(self, declaration, None)

    def declare_kind(self, kind: str) -> None:
        """Accept enqueues of ``kind`` although it is processed elsewhere (untyped and
        without defaults; :meth:`declare` takes a declaration with both)."""
        self._registry.declare(kind)

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

    # ---- limits ---------------------------------------------------------------------

    def _rates(self, controls: Controls) -> RateTable:
        """The rates of this engine's kinds with the run-time ``controls`` (the throttled
        pairs of :meth:`health`): the same :class:`~skiplock.core.EffectiveLimits` its
        workers apply (the stored limits over each kind's ``rate_limit`` and the caps of
        ``Settings.caps``)."""
        specs = self._registry.specs
        limits = EffectiveLimits(
            controls,
            {k: s.policy.rate_limit for k, s in specs.items() if s.policy.rate_limit is not None},
            self._settings.caps,
        )
        return limits.table({kind: spec.provider for kind, spec in specs.items()})

    def _cluster_limits(self, controls: Controls) -> Mapping[str, int]:
        """The kinds' cluster limits in force: those ``controls`` set at run time over
        their policies'."""
        specs = self._registry.specs
        declared = {k: s.policy.cluster_limit for k, s in specs.items() if s.policy.cluster_limit}
        return kind_limits(declared, controls.concurrency, "cluster")

    # ---- workers --------------------------------------------------------------------

    def worker(
        self, *, install_signal_handlers: bool = False, **options: Unpack[WorkerOptions]
    ) -> AsyncWorker:
        """A worker for this engine's processors and settings (see :class:`AsyncWorker`;
        ``options``: :class:`~skiplock.WorkerOptions`).

        It installs no signal handlers unless ``install_signal_handlers=True`` (what the
        ``skiplock worker`` command asks for): a worker embedded in a host process (a web
        server) leaves the host's signal handling alone; see docs/embedding.md. Its
        :meth:`~AsyncWorker.run` also runs the engine's periodic schedules;
        UnknownKindError if one is for a kind this engine may not enqueue
        (``Settings.unknown_kinds``).
        """
        self._intake.requests([schedule.item for schedule in self._scheduler.schedules()])
        parts = WorkerParts(
            store=self._store,
            settings=self._settings,
            processors=self.processors,
            policy=self.policy,
            limiter=self._rate_limiter,
            node_slots=self._node_slots,
            maintenance=self._maintenance,
            scheduler=self._scheduler,
            clock=self._clock,
            metrics=self._metrics,
            tracer=self._tracer,
            audit=self._audit,
            controls=self._controls_cache,
            known_kinds=self.known_kinds,
            claim_errors=self._claim_errors,
        )
        return AsyncWorker(parts, install_signal_handlers=install_signal_handlers, **options)


class _EngineReader(AsyncReader):
    """:meth:`AsyncEngine.reader`: an :class:`AsyncReader` whose health report takes the
    engine's limits and cluster limits, as the engine's own does."""

    def __init__(self, engine: AsyncEngine) -> None:
        reads = engine.reads_store
        super().__init__(reads if reads is not None else engine.store, engine.settings)
        self._engine = engine

    def _rates(self, controls: Controls) -> RateTable:
        return self._engine._rates(controls)

    def _cluster_limits(self, controls: Controls) -> Mapping[str, int]:
        return self._engine._cluster_limits(controls)


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
