"""The worker: claim jobs and run them (async source; ``_worker.py`` is the sync twin).

``AsyncWorker`` runs each job in its own asyncio task, ``Worker`` in its own thread. The
worker is a small coordinator over a few parts, each with its own state (see
docs/architecture.md, "The worker"): the :class:`~._dispatch_async.Dispatcher` (claims,
the prefetch buffer, slots), the :class:`~._runner_async.JobRunner` (one job), the
:class:`~._completer_async.Completer` (batched outcomes), the
:class:`~._lease_async.LeaseKeeper` (registration, heartbeats, lost jobs) and the
engine's :class:`~._limits.RateLimiter` and :class:`~._limits.NodeSlots` (throttling and
node limits, shared by the engine's workers in this process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
from collections.abc import Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from threading import Lock
from typing import TYPE_CHECKING, Self

import attrs

from skiplock._compat_async import (
    Task,
    ThreadSafeEvent,
    blocking_caller,
    cancel_and_join,
    install_signal_handlers,
    join,
    skip_sync,
    spawn,
)
from skiplock.core import KindPolicy, RetryPolicy, ValidationError, WorkerInfo, next_delay
from skiplock.ports import AsyncAudit, AsyncJobStore, Clock, Metrics, Tracer

from ._completer_async import Completer
from ._dispatch_async import Dispatcher
from ._lease_async import LeaseKeeper
from ._limits import NodeSlots, RateLimiter
from ._maintenance_async import Maintenance
from ._observe import worker_started, worker_stopped
from ._registry import ProcessorSpec, check_int
from ._runner_async import JobRunner
from ._scheduler_async import Scheduler
from ._scope import ClaimScope, check_tenants, claim_kinds, default_worker_id
from ._settings import Settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from skiplock.core import RateLimit
    from skiplock.ports import AsyncNotifier


logger = logging.getLogger("skiplock.worker")

#: Upper bound of one notifier wait, so a stopping worker's listener notices quickly.
NOTIFIER_WAIT = 0.1

#: Shortest wait of the scheduler loop before a tick that is (nearly) due.
SCHEDULE_MIN_WAIT = 0.001

#: Waits after a failed claim or lease renewal before the next try (0.1 s doubling up to
#: 5 s, plus up to 50 % jitter; never longer than the poll interval): a store that is back
#: after a lost connection is used again at once, not after a whole poll interval, and
#: one that is down is not hammered. ``max_attempts`` is unused.
STORE_RETRY = RetryPolicy(
    max_attempts=1,
    base=timedelta(seconds=0.1),
    factor=2.0,
    cap=timedelta(seconds=5),
    jitter=0.5,
)


@skip_sync
def _uncancel() -> None:
    # A cancellation of run() was delivered; withdraw the request so the cleanup can await
    # (cancel_and_join re-raises in a task being cancelled). Cancelling again still
    # interrupts the cleanup; the caught CancelledError is re-raised after it.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


@attrs.frozen
class WorkerParts:
    """What a worker is given by its engine (:meth:`AsyncEngine.worker` builds it)."""

    store: AsyncJobStore
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


class AsyncWorker:
    """Claims and runs jobs of its engine's kinds until stopped.

    Build it with :meth:`AsyncEngine.worker`. By default it claims only the kinds its
    engine has processors for (narrowed by ``kinds``) and, with ``tenants``, only those
    tenants' jobs (J2). ``all_kinds=True`` claims every kind and buries jobs of kinds
    without a processor in ``dead`` (R8).

    :meth:`run` serves until :meth:`stop`; :meth:`in_background` runs it in the background
    for the length of a ``with`` block (embedding in a host process, see docs/embedding.md);
    :meth:`run_until_idle` returns once nothing is due and nothing runs. A worker installs
    no signal handlers unless built with ``install_signal_handlers=True`` (as the
    ``skiplock worker`` command does): then, while :meth:`run` runs in the main thread,
    SIGTERM/SIGINT stop it gracefully, a second signal forces the stop and a third abandons
    the cleanup; the handlers found before are put back when it returns or raises. Shutdown
    stops claiming, lets running jobs finish for up to ``Settings.shutdown_timeout``
    seconds, then interrupts the rest and releases them to ``pending`` without using an
    attempt; heartbeats go on during the drain. A forced stop (``stop(force=True)``, a
    cancelled :meth:`run`, ``KeyboardInterrupt``) interrupts and releases running jobs at
    once. Every shutdown ends by removing the worker's row, so stale-claim recovery takes
    whatever is still left ``running`` at once.

    Prefetched (held) jobs pay their attempt only once they start (see
    docs/architecture.md, "The worker"). While the worker's lease is in doubt (a store
    error, or no good heartbeat for half the stale TTL) it starts and claims nothing until
    a heartbeat succeeded; if its registration is gone it drops every job it holds before
    registering again.

    A job's slot is free as soon as its processor returns. Unless the job completed inside
    its own transaction (``transactional=True``), its outcome is then written by the
    completer, batched with others that finished meanwhile (at most
    ``Settings.completion_batch_size`` per call, and no waiting: an idle worker writes at
    once). A write the store rejects with an error is retried with backoff while the
    worker runs, and at shutdown for up to ``shutdown_timeout`` more seconds (one attempt
    when forced); then those jobs are left to stale-claim recovery. :meth:`run_until_idle`
    and shutdown return only after the last write. A crash before a write re-runs those
    jobs after stale-claim recovery (at-least-once). While the store writes slower than
    jobs finish, claiming waits for it: running, held and unwritten jobs together stay
    within :attr:`unwritten_limit`.
    """

    def __init__(
        self,
        parts: WorkerParts,
        *,
        concurrency: int | None = None,
        kinds: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        all_kinds: bool = False,
        worker_id: str | None = None,
        install_signal_handlers: bool = False,
    ) -> None:
        settings = parts.settings
        self._parts = parts
        self._settings = settings
        self._concurrency = check_int(
            "concurrency", settings.concurrency if concurrency is None else concurrency, minimum=1
        )
        self._claim_kinds = claim_kinds(kinds, frozenset(parts.processors), all_kinds)
        checked_id: object = worker_id
        if checked_id is not None and (not isinstance(checked_id, str) or not checked_id.strip()):
            raise ValidationError(f"worker_id must be a non-empty str, got {worker_id!r}")
        self._id = worker_id if worker_id is not None else default_worker_id()
        self._install_signals = install_signal_handlers
        # The worker's own changes (successes, moves to dead) name it as their actor (J10).
        audit = None if parts.audit is None else attrs.evolve(parts.audit, actor=self._id)
        info = WorkerInfo(
            id=self._id,
            host=socket.gethostname(),
            pid=os.getpid(),
            kinds=self._claim_kinds,
            tenants=check_tenants(tenants),
        )
        policies = {kind: spec.policy for kind, spec in parts.processors.items()}
        ttls = [settings.stale_ttl, *(p.stale_ttl for p in policies.values())]
        self._lease = LeaseKeeper(
            store=parts.store,
            info=info,
            interval=settings.heartbeat_interval,
            stale_ttl=min(ttls).total_seconds(),
            held=lambda: self._dispatcher.held_ids(),
            on_lost=lambda ids: self._dispatcher.drop(ids),
            on_gone=lambda: self._dispatcher.drop(None),
        )
        self._completer = Completer(
            store=parts.store,
            worker_id=self._id,
            metrics=parts.metrics,
            batch_size=settings.completion_batch_size,
            give_up_after=settings.shutdown_timeout,
            on_written=lambda: self._dispatcher.wakeup.set(),
            on_store_error=self._lease.store_failed,
            on_settled=lambda job: parts.node_slots.release(job.kind),
            audit=audit,
        )
        provider_caps: dict[str, tuple[str, RateLimit]] = {}
        for kind, spec in parts.processors.items():
            cap = settings.caps.get(spec.provider) if spec.provider is not None else None
            if spec.provider is not None and cap is not None:
                provider_caps[kind] = (spec.provider, cap)
        self._dispatcher = Dispatcher(
            ClaimScope(
                worker_id=self._id,
                concurrency=self._concurrency,
                prefetch=settings.claim_prefetch(self._concurrency),
                batch_size=settings.claim_batch_size(self._concurrency),
                unwritten_limit=settings.unwritten_limit(self._concurrency),
                kinds=self._claim_kinds,
                tenants=info.tenants,
                policies=policies,
                provider_caps=provider_caps,
            ),
            store=parts.store,
            runner=JobRunner(
                store=parts.store,
                worker_id=self._id,
                processors=parts.processors,
                policy=parts.policy,
                limiter=parts.limiter,
                caps=settings.caps,
                clock=parts.clock,
                metrics=parts.metrics,
                on_exit=self._on_processor_exit,
                max_result_bytes=settings.max_result_bytes,
                audit=audit,
            ),
            completer=self._completer,
            lease=self._lease,
            node_slots=parts.node_slots,
            limiter=parts.limiter,
            clock=parts.clock,
            metrics=parts.metrics,
            tracer=parts.tracer,
            audit=audit,
        )
        self._info = info
        self._lock = Lock()
        self._started = False
        self._state = "new"
        self._stop_requested = False
        self._force_requested = False
        self._stop_signals = 0
        # SystemExit/KeyboardInterrupt a processor raised: run() raises it once stopped.
        self._exit: BaseException | None = None
        self._finished = ThreadSafeEvent()
        # Set once serving began (registered) or run() ended: in_background() waits for it.
        self._serving = ThreadSafeEvent()

    # ---- public ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """This worker's id, written to ``claimed_by`` (J1)."""
        return self._id

    @property
    def concurrency(self) -> int:
        """Number of job slots."""
        return self._concurrency

    @property
    def kinds(self) -> frozenset[str] | None:
        """Kinds this worker claims (None: every kind)."""
        return self._claim_kinds

    @property
    def state(self) -> str:
        """``new``, ``running``, ``draining`` (stopped claiming, waiting for jobs) or
        ``stopped``."""
        return self._state

    @property
    def running(self) -> int:
        """Number of jobs running now."""
        return len(self._dispatcher.slots)

    @property
    def held(self) -> int:
        """Claimed jobs that wait for a slot here (prefetched, not started yet)."""
        return self._dispatcher.held

    @property
    def unwritten(self) -> int:
        """Outcomes of finished jobs waiting to be written (or being written) now; never
        more than :attr:`unwritten_limit`."""
        return self._completer.unwritten

    @property
    def unwritten_limit(self) -> int:
        """Most jobs this worker holds whose outcome is not written yet (running,
        prefetched, or waiting for the completer): ``Settings.unwritten_limit``."""
        return self._settings.unwritten_limit(self._concurrency)

    async def run(self) -> None:
        """Serve until :meth:`stop` (or a stop signal, with ``install_signal_handlers``),
        then drain and release.

        Cancelling it (async) or ``KeyboardInterrupt`` (sync) acts as ``stop(force=True)``:
        running jobs are released and the worker unregistered, then the cancellation or
        exception propagates. A processor raising ``SystemExit`` or ``KeyboardInterrupt``
        fails its attempt and stops the worker as :meth:`stop` does; then ``run()`` (and
        :meth:`run_until_idle`) raises that exception.
        """
        await self._serve(until_idle=False)

    async def run_until_idle(self) -> int:
        """Claim and run until nothing is due and nothing runs; never waits for jobs due
        later. Returns the number of claimed jobs handled (any outcome).

        For tests and scripts; no signal handlers, notifier or maintenance.
        """
        return await self._serve(until_idle=True)

    @asynccontextmanager
    async def in_background(self) -> AsyncIterator[Self]:
        """Run the worker in the background while the ``async with`` block runs.

        Async only: :meth:`run` runs in a task of the running loop.

        Sync only: :meth:`run` runs in a background thread (so it never installs signal
        handlers).

        For embedding in a host process (see docs/embedding.md). Entering returns once the
        worker has registered: a worker that cannot start (database unreachable, schema
        missing) raises here. Leaving the block stops it as :meth:`stop` does and waits:
        claiming stops, running jobs get up to ``Settings.shutdown_timeout`` to finish,
        the rest are released to ``pending`` without using an attempt. Leaving by a
        cancellation or ``KeyboardInterrupt``, or being interrupted so while waiting,
        forces the stop (running jobs are released at once). If :meth:`run` raised (a
        processor's ``SystemExit``, a crash), leaving the block raises that error, unless
        the block raised its own (then the worker's error is logged).
        """
        if self._started:
            raise RuntimeError("a worker runs once; build a new one with engine.worker()")
        task = spawn(self._run_in_background)
        try:
            await self._serving.wait()
        except BaseException:
            await self._leave(task, force=True)
            raise
        if task.done():  # run() ended at once: raise why (or go on if stopped before)
            failure = await join(task)
            if failure is not None:
                raise failure
        error: BaseException | None = None
        try:
            yield self
        except BaseException as exc:
            error = exc
            raise
        finally:
            if error is None:
                failure = await self._leave(task, force=False)
                if failure is not None:
                    raise failure
            else:
                forced = isinstance(error, KeyboardInterrupt)
                if True:  # ASYNC
                    forced = forced or isinstance(error, asyncio.CancelledError)
                failure = await self._leave(task, force=forced)
                if failure is not None:
                    logger.error(
                        "worker %s failed while its block raised %s",
                        self._id,
                        type(error).__name__,
                        exc_info=failure,
                    )

    async def _run_in_background(self) -> BaseException | None:
        """:meth:`run` for :meth:`in_background`, returning what it raised: raised in the
        host's code when the block ends (a SystemExit escaping a task would stop the
        host's event loop)."""
        try:
            await self.run()
        except BaseException as exc:
            if True:  # ASYNC
                if isinstance(exc, asyncio.CancelledError):
                    raise  # the host's own cancellation (see _leave)
            return exc
        return None

    async def _leave(
        self, task: Task[BaseException | None], *, force: bool
    ) -> BaseException | None:
        """Stop the worker :meth:`in_background` started and wait for it; returns what its
        :meth:`run` raised, or None.

        Interrupted while waiting (a cancellation, which cancels :meth:`run` too;
        ``KeyboardInterrupt``), it forces the stop, waits for the cleanup and raises the
        interruption.
        """
        self.stop(force=force)
        try:
            return await join(task)
        except BaseException:
            self.stop(force=True)
            if not task.done():
                await join(task)
            raise

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming, drain and release (thread-safe; also before :meth:`run`).

        With ``force=True`` (also after a graceful stop began) stop now: interrupt the
        running jobs at once and release them to ``pending`` without using an attempt,
        write the outcomes waiting (one attempt), unregister. In the sync flavour do not
        call it from a signal handler (it takes locks the interrupted thread may hold);
        start a thread for it.
        """
        self._stop_requested = True
        self._dispatcher.stop_starting()
        if force:
            self._force_requested = True
            self._completer.hurry()
            self._dispatcher.slots.nudge()
        self._dispatcher.wakeup.set()

    @property
    def forced(self) -> bool:
        """True once a forced stop began (``stop(force=True)``, a second stop signal, or
        an interrupted :meth:`run`): running jobs were interrupted and released."""
        return self._force_requested

    def _on_stop_signal(self, signum: int) -> None:
        with self._lock:
            self._stop_signals += 1
            again = self._stop_signals > 1
        name = signal.Signals(signum).name
        if again:
            logger.warning(
                "worker %s: %s received again: stopping now, running jobs are released "
                "(a third signal abandons the cleanup)",
                self._id,
                name,
            )
        else:
            logger.info(
                "worker %s: %s received: claiming stopped, running jobs get up to %.1f s "
                "to finish (send it again to stop now)",
                self._id,
                name,
                self._settings.shutdown_timeout,
            )
        self.stop(force=again)

    def _on_processor_exit(self, exc: BaseException) -> None:
        # The processor's attempt failed (its outcome is queued next): stop as for a
        # SIGTERM, so the other running jobs finish and the held ones are released, then
        # run() raises it and the process exits as the processor asked.
        with self._lock:
            first = self._exit is None
            if first:
                self._exit = exc
        if first:
            logger.error(
                "worker %s: a processor raised %s: stopping (running jobs get up to %.1f s "
                "to finish), then raising it",
                self._id,
                type(exc).__name__,
                self._settings.shutdown_timeout,
            )
        self.stop()

    # ---- serving --------------------------------------------------------------------

    async def _serve(self, *, until_idle: bool) -> int:
        if self._started:
            raise RuntimeError("a worker runs once; build a new one with engine.worker()")
        self._started = True
        uninstall: Callable[[], None] | None = None
        try:
            if self._install_signals and not until_idle:
                uninstall = install_signal_handlers(self._on_stop_signal, give_up_after=3)
            return await self._serve_once(until_idle=until_idle)
        finally:
            # Whatever happened (a third signal abandoning the cleanup too), the host's
            # handlers are back as they were.
            if uninstall is not None:
                uninstall()
            self._serving.set()

    async def _serve_once(self, *, until_idle: bool) -> int:
        notifier: AsyncNotifier | None = None
        helpers: list[Task[None]] = []
        reporting = False
        try:
            try:
                await self._lease.register()
                logger.info(
                    "worker %s started: %d slots, kinds=%s, tenants=%s, store=%r",
                    self._id,
                    self._concurrency,
                    "all" if self._claim_kinds is None else sorted(self._claim_kinds),
                    "all" if self._info.tenants is None else sorted(self._info.tenants),
                    self._parts.store,
                )
                # Gauges and queue depths are read at scrape time, from another thread.
                worker_started(self._parts.metrics, self, blocking_caller(self._parts.store.counts))
                reporting = True
                self._completer.start()
                helpers.append(spawn(self._heartbeat_loop))
                poll = self._settings.poll_interval
                helpers.append(spawn(self._dispatcher.start_loop, self._finished, poll))
                if not until_idle:
                    helpers.append(spawn(self._maintenance_loop))
                    if self._parts.scheduler:
                        helpers.append(spawn(self._schedule_loop))
                    notifier = self._parts.store.notifier()
                    if notifier is not None:
                        await notifier.start()
                        helpers.append(spawn(self._forward_wakeups, notifier))
                self._state = "running"
                self._serving.set()
                await self._dispatch(until_idle=until_idle)
                self._state = "draining"
                await self._dispatcher.drain(
                    self._settings.shutdown_timeout, forced=lambda: self._force_requested
                )
            except BaseException as exc:
                # An error, a cancelled run() or KeyboardInterrupt: a forced stop, then
                # the exception propagates.
                if True:  # ASYNC
                    if isinstance(exc, asyncio.CancelledError):
                        _uncancel()
                logger.warning(
                    "worker %s: run interrupted by %s; stopping now", self._id, type(exc).__name__
                )
                self.stop(force=True)
                self._state = "draining"
                await self._dispatcher.drain(0.0, forced=lambda: True)
                raise
        finally:
            try:
                await self._shut_down(helpers, notifier)
            finally:
                if reporting:
                    worker_stopped(self._parts.metrics, self)
        if self._exit is not None:
            raise self._exit
        return self._dispatcher.handled

    async def _shut_down(
        self,
        helpers: list[Task[None]],
        notifier: AsyncNotifier | None,
    ) -> None:
        # Nested so that an interruption of one step (a third stop signal) still removes
        # the worker's row: then stale-claim recovery takes its jobs at once.
        try:
            # Write the outcomes still waiting before anything else stops (heartbeats go
            # on meanwhile).
            await self._completer.close()
        finally:
            self._state = "stopped"
            self._finished.set()
            self._dispatcher.startable.set()
            try:
                for helper in helpers:
                    await cancel_and_join(helper)
                if notifier is not None:
                    try:
                        await notifier.close()
                    except Exception:
                        logger.exception("worker %s: closing the notifier failed", self._id)
            finally:
                try:
                    if self._lease.registered:  # else there is nothing to remove
                        await self._parts.store.unregister_worker(self._id)
                except Exception:
                    logger.exception("worker %s: unregistering failed", self._id)
                logger.info("worker %s stopped after %d jobs", self._id, self._dispatcher.handled)

    async def _dispatch(self, *, until_idle: bool) -> None:
        dispatcher = self._dispatcher
        poll = self._settings.poll_interval
        failures = 0  # store errors in a row (a failed claim or lease renewal)
        while not self._stop_requested:
            dispatcher.wakeup.clear()
            generation = dispatcher.generation()
            # After a store error, or with no recent heartbeat, renew the lease before
            # anything else is claimed (run_until_idle reports store errors instead).
            if not until_idle and self._lease.in_doubt() and not await self._lease.renew():
                failures += 1
                await dispatcher.wakeup.wait(self._retry_wait(failures))
                continue
            try:
                claimed, limit = await dispatcher.claim()
            except Exception:
                self._lease.store_failed()
                if until_idle:
                    raise
                failures += 1
                wait = self._retry_wait(failures)
                logger.exception("worker %s: claim failed; retrying in %.2f s", self._id, wait)
                await dispatcher.wakeup.wait(wait)
                continue
            failures = 0
            if claimed and claimed >= limit:
                continue  # a full batch: more may be due
            if until_idle and not claimed and dispatcher.idle_since(generation):
                return
            wait = poll
            if dispatcher.throttled_for is not None:
                wait = min(wait, dispatcher.throttled_for)
            await dispatcher.wakeup.wait(wait)

    def _retry_wait(self, failures: int) -> float:
        """Seconds to wait after ``failures`` store errors in a row (:data:`STORE_RETRY`)."""
        delay = next_delay(STORE_RETRY, failures, random.random()).total_seconds()
        return min(delay, self._settings.poll_interval)

    # ---- helpers running beside the dispatcher --------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self._settings.heartbeat_interval
        while not await self._finished.wait(interval):
            if await self._lease.renew(always=True):
                await self._dispatcher.slots.pay()

    async def _maintenance_loop(self) -> None:
        while True:
            # Our own heartbeat first: after an outage, maintenance must not take this
            # live worker's jobs for stale.
            if await self._lease.renew():
                try:
                    await self._parts.maintenance.run(once_per_period=True)
                except Exception:
                    logger.exception("worker %s: maintenance failed", self._id)
            if await self._finished.wait(self._settings.maintenance_interval):
                return

    async def _schedule_loop(self) -> None:
        # Every worker of an engine with schedules runs them: a tick's idempotency key
        # makes the racing passes create one job, and no worker waits for a leader.
        # Woken at the next tick, or after poll_interval at most (the store's clock may
        # run apart from ours, or be a test's fake one).
        scheduler = self._parts.scheduler
        poll = self._settings.poll_interval
        failures = 0
        while True:
            try:
                _, until_next = await scheduler.run_pass()
                failures = 0
                wait = poll
                if until_next is not None:
                    wait = min(poll, max(until_next.total_seconds(), SCHEDULE_MIN_WAIT))
            except Exception:
                failures += 1
                wait = self._retry_wait(failures)
                logger.exception(
                    "worker %s: reading the store's clock for schedules failed; retrying in %.2f s",
                    self._id,
                    wait,
                )
            if await self._finished.wait(wait):
                return

    async def _forward_wakeups(self, notifier: AsyncNotifier) -> None:
        wakeup = self._dispatcher.wakeup
        wait = min(self._settings.poll_interval, NOTIFIER_WAIT)
        while not self._finished.is_set():
            try:
                if await notifier.wait(wait):
                    wakeup.set()
            except Exception:
                logger.exception("worker %s: notifier failed; polling meanwhile", self._id)
                await self._finished.wait(self._settings.poll_interval)
