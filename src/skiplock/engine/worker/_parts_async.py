"""What a worker is made of (async source; ``_parts.py`` is the sync twin).

:class:`WorkerParts` is what the engine hands a worker (shared by the engine's workers in
this process); :func:`build_own_parts` builds the parts each worker owns from them and
wires them to each other: the :class:`~._lease_async.LeaseKeeper`, the
:class:`~._completer_async.Completer` and the :class:`~._dispatch_async.Dispatcher` with
its :class:`~._runner_async.JobRunner` (see docs/worker-internals.md, "The worker").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from skiplock.core import KindPolicy
from skiplock.ports import AsyncAudit, Clock, Metrics, Tracer

from .._controls import ControlsCache, LimitsView
from .._limits import NodeSlots, RateLimiter
from .._maintenance_async import Maintenance
from .._registry import ProcessorSpec
from ..periodic._scheduler_async import Scheduler
from ..settings._settings import Settings
from ._completer_async import Completer
from ._dispatch_async import Dispatcher
from ._lease_async import LeaseKeeper
from ._runner_async import JobRunner
from ._scope import ClaimScope
from ._stores_async import AsyncWorkerStore

if TYPE_CHECKING:
    from skiplock.core import WorkerInfo


@attrs.frozen
class WorkerParts:
    """What a worker is given by its engine (:meth:`AsyncEngine.worker` builds it)."""

    store: AsyncWorkerStore
    settings: Settings
    processors: Mapping[str, ProcessorSpec]
    policy: Callable[[str], KindPolicy]
    limiter: RateLimiter
    node_slots: NodeSlots
    maintenance: Maintenance
    scheduler: Scheduler
    clock: Clock
    metrics: Metrics
    tracer: Tracer
    #: The engine's audit (J10), None while it is off; the worker audits as itself.
    audit: AsyncAudit | None = None
    #: The engine's snapshot of the pauses and limits set at run time (issue 30).
    controls: ControlsCache = attrs.field(factory=ControlsCache)
    #: Every kind the engine knows (a processor or a declaration): the worker names at
    #: start those it does not serve.
    known_kinds: frozenset[str] = frozenset()
    #: The engine's processors read the earlier errors of their jobs (``claim_errors``).
    claim_errors: bool = False


@attrs.frozen
class OwnParts:
    """The parts one worker owns, wired to each other (:func:`build_own_parts`)."""

    lease: LeaseKeeper
    completer: Completer
    dispatcher: Dispatcher


def build_own_parts(
    parts: WorkerParts,
    info: WorkerInfo,
    *,
    concurrency: int,
    on_processor_exit: Callable[[BaseException], None],
) -> OwnParts:
    """The lease keeper, completer and dispatcher of the worker ``info`` describes, with
    ``concurrency`` slots; ``on_processor_exit`` is told of a processor's ``SystemExit``
    or ``KeyboardInterrupt``."""
    settings = parts.settings
    # The worker's own changes (successes, moves to dead) name it as their actor (J10).
    audit = None if parts.audit is None else attrs.evolve(parts.audit, actor=info.id)
    policies = {kind: spec.policy for kind, spec in parts.processors.items()}
    ttls = [settings.stale_ttl, *(p.stale_ttl for p in policies.values())]
    # The lease keeper and the completer call back into the dispatcher built after them.
    lease = LeaseKeeper(
        store=parts.store,
        info=info,
        interval=settings.heartbeat_interval,
        stale_ttl=min(ttls).total_seconds(),
        held=lambda: dispatcher.held_ids(),
        on_lost=lambda ids: dispatcher.drop(ids),
        on_gone=lambda: dispatcher.drop(None),
    )
    completer = Completer(
        store=parts.store,
        worker_id=info.id,
        metrics=parts.metrics,
        batch_size=settings.completion_batch_size,
        give_up_after=settings.shutdown_timeout,
        on_written=lambda: dispatcher.wakeup.set(),
        on_store_error=lease.store_failed,
        on_settled=lambda job: parts.node_slots.release(job.kind),
        audit=audit,
    )
    # The limits in force: the run-time ones over the policies' and settings' (one view,
    # read by the claim planner and the runner alike, and carried by cluster-wide claims).
    limits = LimitsView(
        parts.controls,
        {kind: p.rate_limit for kind, p in policies.items() if p.rate_limit is not None},
        settings.caps,
        {kind: spec.provider for kind, spec in parts.processors.items()},
    )
    dispatcher = Dispatcher(
        ClaimScope(
            worker_id=info.id,
            concurrency=concurrency,
            prefetch=settings.claim_prefetch(concurrency),
            prefetch_ceiling=settings.prefetch_ceiling(concurrency),
            batch_size=settings.claim_batch_size(concurrency),
            unwritten_limit=settings.unwritten_limit(concurrency),
            kinds=info.kinds,
            tenants=info.tenants,
            policies=policies,
            cluster_rates=settings.rate_limit_scope == "cluster",
            with_errors=parts.claim_errors,
        ),
        store=parts.store,
        runner=JobRunner(
            store=parts.store,
            worker_id=info.id,
            processors=parts.processors,
            policy=parts.policy,
            limiter=parts.limiter if settings.rate_limit_scope == "process" else None,
            limits=limits,
            clock=parts.clock,
            metrics=parts.metrics,
            on_exit=on_processor_exit,
            max_result_bytes=settings.max_result_bytes,
            audit=audit,
        ),
        completer=completer,
        lease=lease,
        node_slots=parts.node_slots,
        limiter=parts.limiter,
        limits=limits,
        clock=parts.clock,
        metrics=parts.metrics,
        tracer=parts.tracer,
        audit=audit,
    )
    return OwnParts(lease=lease, completer=completer, dispatcher=dispatcher)
