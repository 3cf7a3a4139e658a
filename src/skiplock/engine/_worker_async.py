"""The worker: claim jobs and run them (async source; ``_worker.py`` is the sync twin).

``AsyncWorker`` runs each job in its own asyncio task, ``Worker`` in its own thread. One
dispatcher plans claims with the core (free slots, per-node and cluster limits, throttled
pairs and providers), sleeps on one wakeup event (set by finished jobs, the store's
notifier and :meth:`stop`) with a fallback poll, and never busy-loops.

Outcomes of jobs that did not complete inside their own transaction go to a completer
(one more task or thread) that writes many of them per ``store.complete`` call
(ARCHITECTURE §8), and retries a failed write with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import traceback
import uuid
from collections import Counter, deque
from datetime import timedelta
from threading import Lock
from typing import TYPE_CHECKING, Any

from skiplock._compat_async import (
    Interruptible,
    Task,
    ThreadSafeEvent,
    cancel_and_join,
    install_signal_handlers,
    join,
    skip_sync,
    spawn,
)
from skiplock.core import (
    Bury,
    Completion,
    FailureKind,
    Job,
    LeaseLostError,
    Outcome,
    Release,
    Retry,
    RetryPolicy,
    Succeeded,
    ValidationError,
    WorkerInfo,
    decide_failure,
    next_delay,
    plan_claim,
)

from ._context import JobContext
from ._errors import JobCancelledError, JobTimeoutError, UndecodablePayloadError
from ._registry import check_int, check_kind

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from skiplock.ports import AsyncNotifier

    from ._engine_async import AsyncEngine
    from ._registry import ProcessorSpec

logger = logging.getLogger("skiplock.worker")

#: How long jobs interrupted at shutdown get to release themselves before we give up.
RELEASE_GRACE = 5.0
#: The same after a forced stop (:meth:`AsyncWorker.stop` with ``force=True``).
FORCE_GRACE = 1.0
#: Waits between attempts to write a batch of outcomes the store failed to take
#: (0.1 s doubling up to 5 s, plus up to 50 % jitter); ``max_attempts`` is unused.
COMPLETION_RETRY = RetryPolicy(
    max_attempts=1,
    base=timedelta(seconds=0.1),
    factor=2.0,
    cap=timedelta(seconds=5),
    jitter=0.5,
)
#: Upper bound of one notifier wait, so a stopping worker's listener notices quickly.
NOTIFIER_WAIT = 0.1
#: What ``_execute`` returns when the outcome waits for the completer.
_QUEUED = "queued"

_LABELS: Mapping[type[Any], str] = {
    Succeeded: "succeeded",
    Retry: "retry",
    Bury: "dead",
    Release: "released",
}


def default_worker_id() -> str:
    """``<host>/<pid>/<uuid4 hex>`` (J1)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex}"


@skip_sync
def _uncancel() -> None:
    # A cancellation of run() was delivered; withdraw the request so the cleanup can await
    # (cancel_and_join re-raises in a task being cancelled). Cancelling again still
    # interrupts the cleanup; the caught CancelledError is re-raised after it.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _format_error(exc: BaseException) -> str:
    summary = "".join(traceback.format_exception_only(exc)).strip()
    details = "".join(traceback.format_exception(exc)).rstrip()
    return f"{summary}\n\n{details}"


class _Run:
    """One claimed job on this worker."""

    __slots__ = ("guard", "job", "lost", "outcome", "task")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.guard = Interruptible()
        self.task: Task[None] | None = None
        # Set (under the worker's lock) when a heartbeat reported the job no longer ours:
        # its lease is gone, so nothing is written for it.
        self.lost = False
        # Set when the outcome is left to the completer (not written in the job's
        # transaction).
        self.outcome: Outcome | None = None


class _Done:
    """An outcome waiting for the completer."""

    __slots__ = ("duration", "job", "outcome")

    def __init__(self, job: Job, outcome: Outcome, duration: float) -> None:
        self.job = job
        self.outcome = outcome
        self.duration = duration


class AsyncWorker:
    """Claims and runs jobs of its engine's kinds until stopped.

    Build it with :meth:`AsyncEngine.worker`. By default it claims only the kinds its
    engine has processors for (narrowed by ``kinds``) and, with ``tenants``, only those
    tenants' jobs (J2). ``all_kinds=True`` claims every kind and buries jobs of kinds
    without a processor in ``dead`` (R8).

    :meth:`run` serves until :meth:`stop` (or SIGTERM/SIGINT when run in the main thread
    with ``install_signal_handlers``; a second signal forces the stop);
    :meth:`run_until_idle` returns once nothing is due and nothing runs. Shutdown stops
    claiming, lets running jobs finish for up to ``Settings.shutdown_timeout`` seconds,
    then interrupts the rest and releases them to ``pending`` without using an attempt;
    heartbeats go on during the drain. A forced stop (``stop(force=True)``, a cancelled
    :meth:`run`, ``KeyboardInterrupt``) interrupts and releases running jobs at once.
    Every shutdown ends by removing the worker's row, so stale-claim recovery takes
    whatever is still left ``running`` at once.

    A job's slot is free as soon as its processor returns. Unless the job completed inside
    its own transaction (``transactional=True``), its outcome is then written by the
    completer, batched with others that finished meanwhile (at most
    ``Settings.completion_batch_size`` per call, and no waiting: an idle worker writes at
    once). A write the store rejects with an error is retried with backoff (see
    :data:`COMPLETION_RETRY`) while the worker runs, and at shutdown for up to
    ``shutdown_timeout`` more seconds (one attempt when forced); then those jobs are left
    to stale-claim recovery. :meth:`run_until_idle` and shutdown return only after the
    last write. A crash before a write re-runs those jobs after stale-claim recovery
    (at-least-once).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        concurrency: int | None = None,
        kinds: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        all_kinds: bool = False,
        worker_id: str | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        settings = engine.settings
        self._engine = engine
        self._store = engine.store
        self._settings = settings
        self._clock = engine.clock
        self._metrics = engine.metrics
        self._tracer = engine.tracer
        self._concurrency = check_int(
            "concurrency", settings.concurrency if concurrency is None else concurrency, minimum=1
        )
        self._prefetch = settings.claim_prefetch(self._concurrency)
        self._batch_size = settings.claim_batch_size(self._concurrency)
        self._completion_batch = settings.completion_batch_size
        self._specs = engine.processors
        registered = frozenset(self._specs)
        self._claim_kinds: frozenset[str] | None
        if kinds is not None:
            names = [kinds] if isinstance(kinds, str) else list(kinds)
            wanted = frozenset(check_kind(k) for k in names)
            missing = sorted(wanted - registered)
            if missing and not all_kinds:
                raise ValidationError(
                    f"no processor registered for kinds {missing}; register them, or pass "
                    "all_kinds=True to claim and bury them"
                )
            self._claim_kinds = wanted
        elif all_kinds:
            self._claim_kinds = None
        else:
            if not registered:
                raise ValidationError(
                    "this engine has no processors: register some, or pass all_kinds=True"
                )
            self._claim_kinds = registered
        self._tenants: frozenset[str] | None = None
        if tenants is not None:
            given: list[object] = [tenants] if isinstance(tenants, str) else list(tenants)
            if not given or not all(isinstance(t, str) and t for t in given):
                raise ValidationError(f"tenants must be non-empty strings, got {tenants!r}")
            self._tenants = frozenset(str(t) for t in given)
        checked_id: object = worker_id
        if checked_id is not None and (not isinstance(checked_id, str) or not checked_id.strip()):
            raise ValidationError(f"worker_id must be a non-empty str, got {worker_id!r}")
        self._id = worker_id if worker_id is not None else default_worker_id()
        self._install_signals = install_signal_handlers
        self._info = WorkerInfo(
            id=self._id,
            host=socket.gethostname(),
            pid=os.getpid(),
            kinds=self._claim_kinds,
            tenants=self._tenants,
        )

        policies = {kind: spec.policy for kind, spec in self._specs.items()}
        self._node_limits = {k: p.node_limit for k, p in policies.items() if p.node_limit}
        if self._prefetch:
            # No prefetch for rate-limited kinds: their throughput is the bucket's, and
            # buffered jobs would only be throttled one by one.
            for kind, spec in self._specs.items():
                capped = spec.provider is not None and spec.provider in settings.caps
                if spec.policy.rate_limit is not None or capped:
                    limit = self._node_limits.get(kind, self._concurrency)
                    self._node_limits[kind] = min(limit, self._concurrency)
        self._cluster_limits = {k: p.cluster_limit for k, p in policies.items() if p.cluster_limit}
        self._provider_kinds: dict[str, set[str]] = {}
        for kind, spec in self._specs.items():
            if spec.provider is not None:
                self._provider_kinds.setdefault(spec.provider, set()).add(kind)

        # State shared by the dispatcher and the jobs (tasks or threads): a plain lock,
        # never held across an await.
        self._lock = Lock()
        self._running: dict[int, _Run] = {}
        # Claimed jobs waiting for a slot (prefetch): ``running`` in the database under
        # this worker's id, so its heartbeat covers them like the running ones.
        self._buffer: deque[Job] = deque()
        # Shared by every worker of the engine in this process (J6).
        self._limiter = engine._rate_limiter
        self._throttled_pairs: dict[tuple[str, str | None], float] = {}
        self._throttled_kinds: dict[str, float] = {}
        self._processed = 0
        self._finished_count = 0
        self._started = False
        self._state = "new"
        self._stop_requested = False
        self._force_requested = False
        self._stop_signals = 0
        self._wakeup: ThreadSafeEvent | None = None
        self._finished: ThreadSafeEvent | None = None
        # The completer's state, under the same lock: outcomes waiting, how many are
        # being written now, and whether it still accepts work.
        self._outbox: list[_Done] = []
        self._flushing = 0
        self._outbox_closed = False
        self._outbox_ready: ThreadSafeEvent | None = None
        # Set on close and on a forced stop: cuts the completer's retry wait short.
        self._flush_now: ThreadSafeEvent | None = None
        self._completer: Task[None] | None = None

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
        with self._lock:
            return len(self._running)

    async def run(self) -> None:
        """Serve until :meth:`stop` (or a stop signal), then drain and release.

        Cancelling it (async) or ``KeyboardInterrupt`` (sync) acts as ``stop(force=True)``:
        running jobs are released and the worker unregistered, then the cancellation or
        exception propagates.
        """
        await self._serve(until_idle=False)

    async def run_until_idle(self) -> int:
        """Claim and run until nothing is due and nothing runs; never waits for jobs due
        later. Returns the number of claimed jobs handled (any outcome).

        For tests and scripts; no signal handlers, notifier or maintenance.
        """
        return await self._serve(until_idle=True)

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming, drain and release (thread-safe; also before :meth:`run`).

        With ``force=True`` (also after a graceful stop began) stop now: interrupt the
        running jobs at once and release them to ``pending`` without using an attempt,
        write the outcomes waiting (one attempt), unregister. In the sync flavour do not
        call it from a signal handler (it takes locks the interrupted thread may hold);
        start a thread for it.
        """
        self._stop_requested = True
        if force:
            self._force_requested = True
        for event in (self._wakeup, self._flush_now if force else None):
            if event is not None:
                event.set()

    def _on_stop_signal(self) -> None:
        with self._lock:
            self._stop_signals += 1
            again = self._stop_signals > 1
        if again:
            logger.warning("worker %s: stop signal received again; stopping now", self._id)
        self.stop(force=again)

    # ---- serving --------------------------------------------------------------------

    async def _serve(self, *, until_idle: bool) -> int:
        if self._started:
            raise RuntimeError("a worker runs once; build a new one with engine.worker()")
        self._started = True
        self._wakeup = ThreadSafeEvent()
        self._finished = ThreadSafeEvent()
        self._outbox_ready = ThreadSafeEvent()
        self._flush_now = ThreadSafeEvent()
        uninstall = None
        if self._install_signals and not until_idle:
            uninstall = install_signal_handlers(self._on_stop_signal)
        notifier: AsyncNotifier | None = None
        helpers: list[Task[None]] = []
        try:
            try:
                await self._store.register_worker(self._info)
                logger.info(
                    "worker %s started: %d slots, kinds=%s, tenants=%s",
                    self._id,
                    self._concurrency,
                    "all" if self._claim_kinds is None else sorted(self._claim_kinds),
                    "all" if self._tenants is None else sorted(self._tenants),
                )
                self._completer = spawn(self._completion_loop)
                helpers.append(spawn(self._heartbeat_loop))
                if not until_idle:
                    helpers.append(spawn(self._maintenance_loop))
                    notifier = self._store.notifier()
                    if notifier is not None:
                        await notifier.start()
                        helpers.append(spawn(self._forward_wakeups, notifier))
                self._state = "running"
                await self._dispatch(until_idle=until_idle)
                self._state = "draining"
                await self._drain(self._settings.shutdown_timeout)
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
                await self._drain(0.0)
                raise
        finally:
            await self._shut_down(helpers, notifier, uninstall)
        return self._processed

    async def _shut_down(
        self,
        helpers: list[Task[None]],
        notifier: AsyncNotifier | None,
        uninstall: Callable[[], None] | None,
    ) -> None:
        # Nested so that an interruption of one step (a third stop signal) still removes
        # the worker's row: then stale-claim recovery takes its jobs at once.
        assert self._finished is not None
        try:
            # Write the outcomes still waiting before anything else stops (heartbeats go
            # on meanwhile).
            await self._close_completer()
        finally:
            self._state = "stopped"
            self._finished.set()
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
                    await self._store.unregister_worker(self._id)
                except Exception:
                    logger.exception("worker %s: unregistering failed", self._id)
                if uninstall is not None:
                    uninstall()
                logger.info("worker %s stopped after %d jobs", self._id, self._processed)

    async def _dispatch(self, *, until_idle: bool) -> None:
        assert self._wakeup is not None
        while not self._stop_requested:
            self._wakeup.clear()
            with self._lock:
                generation = self._finished_count
            self._start_buffered()
            try:
                claimed, limit = await self._claim()
            except Exception:
                if until_idle:
                    raise
                logger.exception("worker %s: claim failed; retrying after the poll", self._id)
                claimed, limit = 0, 1
            if claimed and claimed >= limit:
                continue  # a full batch: more may be due
            if until_idle and not claimed and self._idle_since(generation):
                return
            await self._wakeup.wait(self._settings.poll_interval)

    def _idle_since(self, generation: int) -> bool:
        # Nothing runs, no outcome waits to be written, and no job finished nor outcome
        # was written since the claim started (either may have made another job due).
        with self._lock:
            return (
                not self._running
                and not self._buffer
                and not self._outbox
                and not self._flushing
                and self._finished_count == generation
            )

    async def _claim(self) -> tuple[int, int]:
        now = self._clock.monotonic()
        with self._lock:
            self._throttled_pairs = {p: t for p, t in self._throttled_pairs.items() if t > now}
            self._throttled_kinds = {k: t for k, t in self._throttled_kinds.items() if t > now}
            # Buffered jobs count as running: node limits hold once they start.
            running = Counter(run.job.kind for run in self._running.values())
            running.update(job.kind for job in self._buffer)
            held = len(self._running) + len(self._buffer)
            # Claim again only once the buffer ran low, so a finished job does not cost
            # a claim of one; with no prefetch the buffer is always empty.
            if self._buffer and len(self._buffer) > self._prefetch // 2:
                return 0, 0
            free = self._concurrency + self._prefetch - held
            excluded = frozenset(self._throttled_pairs)
            excluded_kinds = frozenset(self._throttled_kinds)
        plan = plan_claim(
            worker_id=self._id,
            free_slots=free,
            batch_size=self._batch_size,
            running=running,
            node_limits=self._node_limits,
            cluster_limits=self._cluster_limits,
            kinds=self._claim_kinds,
            tenants=self._tenants,
            excluded=excluded,
            excluded_kinds=excluded_kinds,
        )
        if plan is None:
            return 0, 0
        jobs = await self._store.claim(plan)
        for job in jobs:
            latency = 0.0
            if job.claimed_at is not None:
                latency = max(0.0, (job.claimed_at - job.available_at).total_seconds())
            self._metrics.job_claimed(job.kind, job.tenant, latency)
        with self._lock:
            self._buffer.extend(jobs)
        self._start_buffered()
        return len(jobs), plan.limit

    def _start_buffered(self) -> None:
        """Start buffered jobs in the free slots (in claim order); none once stopping."""
        runs: list[_Run] = []
        with self._lock:
            if self._stop_requested:
                return
            while self._buffer and len(self._running) < self._concurrency:
                run = _Run(self._buffer.popleft())
                self._running[run.job.id] = run
                runs.append(run)
        for run in runs:
            run.task = spawn(self._run_job, run)

    def _release_buffered(self) -> None:
        """Give the claimed jobs that never started back to ``pending`` without using an
        attempt (written by the completer)."""
        with self._lock:
            jobs = list(self._buffer)
            self._buffer.clear()
        if not jobs:
            return
        logger.info(
            "worker %s: releasing %d claimed job(s) that did not start", self._id, len(jobs)
        )
        for job in jobs:
            done = _Done(job, Release(), 0.0)
            if not self._submit(done):
                self._give_up([done], RuntimeError("the completer is closed"))

    async def _drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` (cut short by a forced stop) for the running jobs, then
        interrupt the rest: they release themselves. Buffered jobs are released first."""
        self._release_buffered()
        if await self._wait_until_empty(timeout, forcible=True):
            return
        with self._lock:
            runs = list(self._running.values())
        forced = self._force_requested
        logger.warning(
            "worker %s: interrupting %d running job(s) %s; they are released without using "
            "an attempt",
            self._id,
            len(runs),
            "(forced stop)" if forced else f"still running after {timeout:.1f} s",
        )
        for run in runs:
            run.guard.interrupt(JobCancelledError("the worker is shutting down"))
        if not await self._wait_until_empty(FORCE_GRACE if forced else RELEASE_GRACE):
            logger.error(
                "worker %s: %d job(s) ignored the interruption; stale-claim recovery "
                "will return them to pending once this worker has unregistered",
                self._id,
                self.running,
            )

    async def _wait_until_empty(self, timeout: float, *, forcible: bool = False) -> bool:
        """True once nothing runs; False after ``timeout`` (or, if ``forcible``, as soon as
        a forced stop is requested while jobs run)."""
        assert self._wakeup is not None
        deadline = time.monotonic() + timeout
        while True:
            self._wakeup.clear()
            if not self.running:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (forcible and self._force_requested):
                return False
            await self._wakeup.wait(remaining)

    # ---- helpers running beside the dispatcher --------------------------------------

    async def _heartbeat_loop(self) -> None:
        assert self._finished is not None
        while not await self._finished.wait(self._settings.heartbeat_interval):
            try:
                await self._beat()
            except Exception:
                logger.exception("worker %s: heartbeat failed", self._id)

    async def _beat(self) -> None:
        """One heartbeat covering every job this worker holds (running and buffered);
        re-register if the store lost the worker's row, stop the jobs it reports lost."""
        with self._lock:
            held = sorted({*self._running, *(job.id for job in self._buffer)})
        lost = await self._store.heartbeat(self._id, held)
        if lost is None:
            # Recovered as stale (or the row was deleted): without a row its jobs are
            # recovered at once by the next maintenance run.
            logger.warning(
                "worker %s: its registration is gone (recovered as stale?); registering again",
                self._id,
            )
            await self._store.register_worker(self._info)
            return
        if lost:
            self._drop_lost(lost)

    def _drop_lost(self, ids: Iterable[int]) -> None:
        """Stop the jobs no longer claimed by this worker (cancelled, recovered, deleted):
        interrupt the running ones, forget the buffered ones; nothing is written for
        them (R13)."""
        lost = set(ids)
        with self._lock:
            runs = [run for run in self._running.values() if run.job.id in lost]
            for run in runs:
                run.lost = True
            dropped = [job for job in self._buffer if job.id in lost]
            if dropped:
                self._buffer = deque(job for job in self._buffer if job.id not in lost)
                self._processed += len(dropped)
                self._finished_count += 1
        for job in dropped:
            self._lost(job)
            self._job_finished(job, "lost", 0.0)
        for run in runs:
            run.guard.interrupt(
                JobCancelledError(f"job {run.job.id} is no longer claimed by this worker")
            )
        if dropped and self._wakeup is not None:
            self._wakeup.set()  # the buffer has room again

    async def _maintenance_loop(self) -> None:
        assert self._finished is not None
        while True:
            try:
                await self._engine.maintain(once_per_period=True)
            except Exception:
                logger.exception("worker %s: maintenance failed", self._id)
            if await self._finished.wait(self._settings.maintenance_interval):
                return

    async def _forward_wakeups(self, notifier: AsyncNotifier) -> None:
        assert self._finished is not None
        assert self._wakeup is not None
        wait = min(self._settings.poll_interval, NOTIFIER_WAIT)
        while not self._finished.is_set():
            try:
                if await notifier.wait(wait):
                    self._wakeup.set()
            except Exception:
                logger.exception("worker %s: notifier failed; polling meanwhile", self._id)
                await self._finished.wait(self._settings.poll_interval)

    # ---- running one job ------------------------------------------------------------

    async def _run_job(self, run: _Run) -> None:
        job = run.job
        started = self._clock.monotonic()
        label = "error"
        try:
            with self._tracer.span(job):
                label = await self._execute(run)
        except Exception:
            logger.exception(
                "worker %s: job %d (%s) could not be completed; it stays running until "
                "stale-claim recovery",
                self._id,
                job.id,
                job.kind,
            )
        finally:
            duration = max(0.0, self._clock.monotonic() - started)
            if run.outcome is None:
                self._job_finished(job, label, duration)
            elif not self._submit(_Done(job, run.outcome, duration)):
                # The completer is gone (a job that outlived the shutdown): write it here,
                # once.
                late = _Done(job, run.outcome, duration)
                error = await self._write([late])
                if error is not None:
                    self._give_up([late], error)
            # Free the slot last (after queueing the outcome), so whoever waits for it
            # sees the job's every effect, or its outcome waiting to be written.
            with self._lock:
                self._running.pop(job.id, None)
                self._processed += 1
                self._finished_count += 1
            # The next buffered job takes the slot at once, also while the dispatcher
            # waits for a claim.
            self._start_buffered()
            if self._wakeup is not None:
                self._wakeup.set()

    def _job_finished(self, job: Job, label: str, duration: float) -> None:
        try:
            self._metrics.job_finished(job.kind, job.tenant, label, duration)
        except Exception:
            logger.exception("worker %s: metrics failed", self._id)

    async def _execute(self, run: _Run) -> str:
        job = run.job
        spec = self._specs.get(job.kind)
        if spec is None:
            logger.warning(
                "worker %s: no processor for kind %r; job %d goes to dead",
                self._id,
                job.kind,
                job.id,
            )
            policy = self._engine.policy(job.kind)
            outcome = decide_failure(
                FailureKind.UNKNOWN_KIND,
                job.kind,
                attempt=job.attempts,
                max_attempts=job.max_attempts,
                retry=policy.retry,
                jitter=0.0,
            )
            return self._finish(run, outcome)

        wait = self._throttle(job, spec)
        if wait > 0:
            self._metrics.rate_limited(job.kind, job.tenant)
            outcome = decide_failure(
                FailureKind.THROTTLED,
                "rate limited",
                attempt=job.attempts,
                max_attempts=job.max_attempts,
                retry=spec.policy.retry,
                jitter=0.0,
                retry_after=wait,
            )
            return self._finish(run, outcome)

        try:
            payload = spec.decode(job.payload)
        except UndecodablePayloadError as exc:
            logger.error("worker %s: job %d (%s): %s", self._id, job.id, job.kind, exc)
            outcome = decide_failure(
                FailureKind.UNDECODABLE,
                str(exc),
                attempt=job.attempts,
                max_attempts=job.max_attempts,
                retry=spec.policy.retry,
                jitter=0.0,
            )
            return self._finish(run, outcome)

        ctx = JobContext(job, self._id, cancel=run.guard)
        lost = False
        # R22: the job's database work is bounded by its own timeout, also server-side.
        statement_timeout = spec.policy.timeout
        try:
            if spec.policy.transactional:
                # R10: the processor's writes and the completion commit together.
                async with self._store.transaction(statement_timeout=statement_timeout) as tx:
                    ctx.connection = tx
                    await self._call(spec, payload, ctx, run.guard)
                    done = await self._store.complete(
                        [Completion(job.lease, Succeeded())], connection=tx
                    )
                    if not done[0]:
                        lost = True
                        raise LeaseLostError(f"job {job.id} is no longer claimed by {self._id}")
                return "succeeded"
            if spec.policy.autocommit:
                # For work that cannot run in a transaction (CREATE INDEX CONCURRENTLY).
                async with self._store.autocommit(
                    statement_timeout=statement_timeout
                ) as connection:
                    ctx.connection = connection
                    await self._call(spec, payload, ctx, run.guard)
            else:
                # The default: no connection is held while the processor runs.
                await self._call(spec, payload, ctx, run.guard)
        except Exception as exc:
            if lost or run.lost:
                return self._lost(job)
            return self._fail(run, spec, exc)
        return self._finish(run, Succeeded())

    async def _call(
        self, spec: ProcessorSpec, payload: Any, ctx: JobContext, guard: Interruptible
    ) -> None:
        timeout = spec.policy.timeout
        job_id, kind = ctx.job_id, ctx.kind

        def timeout_error() -> JobTimeoutError:
            return JobTimeoutError(f"job {job_id} ({kind}) ran past its timeout of {timeout} s")

        async with guard.region(timeout, timeout_error):
            if spec.is_async:
                await spec.fn(*spec.args(payload, ctx))
            else:
                await guard.call_blocking(spec.fn, *spec.args(payload, ctx))

    def _fail(self, run: _Run, spec: ProcessorSpec, exc: Exception) -> str:
        job = run.job
        interrupted = run.guard.error
        if isinstance(interrupted, JobCancelledError):
            return self._finish(run, Release())
        if isinstance(interrupted, JobTimeoutError):
            failure, text = FailureKind.TIMEOUT, f"ran longer than {spec.policy.timeout} s"
        else:
            failure, text = FailureKind.ERROR, _format_error(exc)
        outcome = decide_failure(
            failure,
            text,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            retry=spec.policy.retry,
            jitter=random.random(),
        )
        level = logging.ERROR if isinstance(outcome, Bury) else logging.WARNING
        logger.log(
            level,
            "worker %s: job %d (%s) attempt %d/%d failed (%s): %s",
            self._id,
            job.id,
            job.kind,
            job.attempts,
            job.max_attempts,
            "dead" if isinstance(outcome, Bury) else "will retry",
            text.partition("\n")[0],
        )
        return self._finish(run, outcome)

    def _finish(self, run: _Run, outcome: Outcome) -> str:
        # The completer writes it once the slot is free (see _run_job).
        run.outcome = outcome
        return _QUEUED

    def _lost(self, job: Job) -> str:
        logger.warning(
            "worker %s: job %d (%s) was no longer ours (recovered, cancelled or deleted); "
            "its result is discarded",
            self._id,
            job.id,
            job.kind,
        )
        return "lost"

    # ---- the completer (ARCHITECTURE §8) ----------------------------------------------

    def _submit(self, done: _Done) -> bool:
        """Queue an outcome for the completer; False once it stopped accepting."""
        assert self._outbox_ready is not None
        with self._lock:
            if self._outbox_closed:
                return False
            self._outbox.append(done)
        self._outbox_ready.set()
        return True

    async def _completion_loop(self) -> None:
        # No timer: each round writes whatever accumulated while the previous write ran,
        # so batches grow with the load and an idle worker's outcome is written at once.
        # A failed write goes back to the head of the outbox and is retried after a
        # backoff, together with the outcomes that arrived meanwhile.
        assert self._outbox_ready is not None
        assert self._flush_now is not None
        failures = 0
        give_up_at: float | None = None
        while True:
            if not failures:
                await self._outbox_ready.wait()
                self._outbox_ready.clear()
            # Cleared before reading the state: a close or forced stop from now on ends
            # the retry wait below at once.
            self._flush_now.clear()
            with self._lock:
                closed = self._outbox_closed
            error = await self._flush()
            if error is None:
                failures = 0
                if closed:  # and the outbox was empty since: nothing more can come
                    return
                continue
            failures += 1
            delay = next_delay(COMPLETION_RETRY, failures, random.random()).total_seconds()
            if closed:
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + self._settings.shutdown_timeout
                if self._force_requested or now >= give_up_at:
                    with self._lock:
                        dropped = list(self._outbox)
                        self._outbox.clear()
                    self._give_up(dropped, error)
                    return
                delay = min(delay, give_up_at - now)
            logger.warning(
                "worker %s: completing jobs failed (%s: %s); attempt %d, retrying in %.2f s",
                self._id,
                type(error).__name__,
                error,
                failures,
                delay,
                exc_info=error if failures == 1 else None,
            )
            await self._flush_now.wait(delay)

    async def _flush(self) -> Exception | None:
        """Write the outbox in batches until it is empty; on a failed write put the batch
        back at its head and return the error."""
        assert self._wakeup is not None
        while True:
            with self._lock:
                batch = self._outbox[: self._completion_batch]
                del self._outbox[: len(batch)]
                self._flushing = len(batch)
            if not batch:
                return None
            error = await self._write(batch)
            # One critical section: _idle_since never sees the batch in neither place.
            with self._lock:
                self._flushing = 0
                if error is None:
                    self._finished_count += 1
                else:
                    self._outbox[:0] = batch
            if error is not None:
                return error
            self._wakeup.set()  # written outcomes may have made jobs due

    async def _write(self, batch: list[_Done]) -> Exception | None:
        """One ``store.complete`` call for ``batch``; returns the store's error (nothing is
        reported then: the caller retries or gives up)."""
        try:
            applied = await self._store.complete(
                [Completion(done.job.lease, done.outcome) for done in batch]
            )
        except Exception as exc:
            return exc
        if len(applied) != len(batch):
            # A broken store: which ones it applied is unknown, so do not retry.
            logger.error(
                "worker %s: store.complete returned %d results for %d jobs (ids %s)",
                self._id,
                len(applied),
                len(batch),
                ", ".join(str(done.job.id) for done in batch),
            )
            labels = ["error"] * len(batch)
        else:
            labels = [
                _LABELS[type(done.outcome)] if ok else self._lost(done.job)
                for done, ok in zip(batch, applied, strict=True)
            ]
        for done, label in zip(batch, labels, strict=True):
            self._job_finished(done.job, label, done.duration)
        return None

    def _give_up(self, dropped: list[_Done], error: Exception) -> None:
        if not dropped:
            return
        logger.error(
            "worker %s: giving up completing %d job(s) (ids %s): %s: %s; they stay running "
            "until stale-claim recovery returns them to pending (at once after this worker "
            "unregistered)",
            self._id,
            len(dropped),
            ", ".join(str(done.job.id) for done in dropped),
            type(error).__name__,
            error,
        )
        for done in dropped:
            self._job_finished(done.job, "error", done.duration)

    async def _close_completer(self) -> None:
        """Stop accepting outcomes, write those waiting and wait for the completer."""
        task, self._completer = self._completer, None
        if task is None:
            return
        assert self._outbox_ready is not None
        assert self._flush_now is not None
        with self._lock:
            self._outbox_closed = True
        self._outbox_ready.set()
        self._flush_now.set()
        try:
            await join(task)
        except Exception:
            logger.exception("worker %s: the completer failed", self._id)

    # ---- rate limits (J6) -----------------------------------------------------------

    def _throttle(self, job: Job, spec: ProcessorSpec) -> float:
        """Take a token from the (kind, tenant) bucket and the provider's, both shared by
        the engine's workers in this process; 0.0 if both had one, else the seconds until
        they will (nothing is taken then)."""
        limit = spec.policy.rate_limit
        provider = spec.provider
        cap = self._settings.caps.get(provider) if provider is not None else None
        if limit is None and cap is None:
            return 0.0
        now = self._clock.monotonic()
        pair = (job.kind, job.tenant)
        pair_wait, cap_wait = self._limiter.take(pair, limit, provider, cap, now)
        if pair_wait == 0 and cap_wait == 0:
            return 0.0
        with self._lock:
            # Keep the throttled pair/kinds out of claims until a token is there, so a
            # throttled backlog costs no claims.
            if pair_wait > 0:
                self._throttled_pairs[pair] = now + pair_wait
            if cap_wait > 0 and provider is not None:
                for kind in self._provider_kinds.get(provider, ()):
                    until = max(self._throttled_kinds.get(kind, 0.0), now + cap_wait)
                    self._throttled_kinds[kind] = until
        return max(pair_wait, cap_wait)
