"""The worker: claim jobs and run them (async source; ``_worker.py`` is the sync twin).

``AsyncWorker`` runs each job in its own asyncio task, ``Worker`` in its own thread. The
worker is a small coordinator over a few parts, each with its own state (see
docs/worker-internals.md, "The worker"): the :class:`~._dispatch_async.Dispatcher` (claims,
the prefetch buffer, slots), the :class:`~._runner_async.JobRunner` (one job), the
:class:`~._completer_async.Completer` (batched outcomes), the
:class:`~._lease_async.LeaseKeeper` (registration, heartbeats, lost jobs) and the
engine's :class:`~.._limits.RateLimiter` and :class:`~.._limits.NodeSlots` (throttling and
node limits, shared by the engine's workers in this process). They are built and wired in
``_parts_async.py``; the loops the worker runs while it serves are in
``_loops_async.py``, how it lives in its host process (in the background, under stop
signals) in ``_host_async.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from contextlib import asynccontextmanager
from threading import Lock
from typing import TYPE_CHECKING, Self

from skiplock._compat_async import (
    Task,
    ThreadSafeEvent,
    blocking_caller,
    cancel_and_join,
    install_signal_handlers,
    skip_sync,
    spawn,
)
from skiplock.core import ValidationError, WorkerInfo

from .._observe import worker_started, worker_stopped
from .._registry import check_int
from ._draining import Draining
from ._host_async import StopSignals, serve_in_background
from ._loops_async import WorkerLoops
from ._parts_async import WorkerParts, build_own_parts
from ._scope import check_tenants, claim_kinds, default_worker_id, skiplock_version

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable

    from skiplock.core.store import WorkerRequest
    from skiplock.ports import AsyncNotifier

    from ._timer import Wakeup


logger = logging.getLogger("skiplock.worker")


def _ids(ids: list[int], most: int = 20) -> str:
    """``[1, 2, 3]``, at most ``most`` of them named."""
    if len(ids) <= most:
        return str(ids)
    return f"{ids[:most]} and {len(ids) - most} more"


@skip_sync
def _uncancel() -> None:
    # A cancellation of run() was delivered; withdraw the request so the cleanup can await
    # (cancel_and_join re-raises in a task being cancelled). Cancelling again still
    # interrupts the cleanup; the caught CancelledError is re-raised after it.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


class AsyncWorker(Draining):
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
    once; a processor that ignores the interruption (blocked in a call that cannot be
    interrupted) is left behind after a short grace and its job released all the same.
    Every shutdown ends by removing the worker's row, which releases whatever is still
    ``running`` under its id (an outcome that could not be written; attempts unchanged);
    only when the database does not answer is it left to stale-claim recovery.

    Prefetched (held) jobs pay their attempt only once they start (see
    docs/worker-internals.md, "The worker"). While the worker's lease is in doubt (a store
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
        info = WorkerInfo(
            id=self._id,
            host=socket.gethostname(),
            pid=os.getpid(),
            kinds=self._claim_kinds,
            tenants=check_tenants(tenants),
            slots=self._concurrency,
            version=skiplock_version(),
        )
        own = build_own_parts(
            parts, info, concurrency=self._concurrency, on_processor_exit=self._on_processor_exit
        )
        self._lease = own.lease
        self._completer = own.completer
        self._dispatcher = own.dispatcher
        self._info = info
        self._lock = Lock()
        self._started = False
        self._state = "new"
        self._stop_requested = False
        self._force_requested = False
        self._drain_timeout = settings.shutdown_timeout
        self._stop_at: float | None = None
        self._request: WorkerRequest | None = None
        # SystemExit/KeyboardInterrupt a processor raised: run() raises it once stopped.
        self._exit: BaseException | None = None
        self._finished = ThreadSafeEvent()
        # Set once serving began (registered) or run() ended: in_background() waits for it.
        self._serving = ThreadSafeEvent()
        self._began = False  # set with _serving once it serves (not when run() ends)
        self._loops = WorkerLoops(
            worker_id=self._id,
            settings=settings,
            lease=self._lease,
            dispatcher=self._dispatcher,
            finished=self._finished,
            on_request=self._on_request,
        )

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
    def paused(self) -> tuple[tuple[str | None, str | None], ...]:
        """The ``(kind, tenant)`` pauses in force (None: any) as this worker last read
        them (every ``Settings.controls_refresh``); their jobs are not claimed."""
        controls, _ = self._parts.controls.current()
        return tuple((p.kind, p.tenant) for p in controls.pauses)

    @property
    def unwritten_limit(self) -> int:
        """Most jobs this worker holds whose outcome is not written yet (running,
        prefetched, or waiting for the completer): ``Settings.unwritten_limit``."""
        return self._settings.unwritten_limit(self._concurrency)

    @property
    def next_wakeup(self) -> Wakeup | None:
        """When the claim loop's current wait ends (``at``, on the engine clock's
        ``monotonic()`` scale) and what it waits for: the next poll, or sooner the time
        the earliest job of this worker's kinds and tenants falls due (``due`` on the same
        scale, ``due_at`` on the store's clock). None before the first wait. A snapshot,
        for tests and diagnostics (see docs/worker-internals.md, "The worker")."""
        return self._dispatcher.timer.armed()

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
        async with serve_in_background(self, self._serving, lambda: self._began):
            yield self

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming, drain and release (thread-safe; also before :meth:`run`).

        With ``force=True`` (also after a graceful stop began) stop now: interrupt the
        running jobs at once and release them to ``pending`` without using an attempt,
        write the outcomes waiting (one attempt), unregister. In the sync flavour do not
        call it from a signal handler (it takes locks the interrupted thread may hold);
        start a thread for it.
        """
        self._stopping_now()
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

    def _on_processor_exit(self, exc: BaseException) -> None:
        # The processor's attempt failed (its outcome is queued next): stop as for a
        # SIGTERM, so the other running jobs finish and the held ones are released, then
        # run() raises it and the process exits as the processor asked. With
        # processor_exits="fail" the failed attempt is all it does.
        if self._settings.processor_exits == "fail":
            return
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
                on_signal = StopSignals(self, drain_timeout=self._settings.shutdown_timeout)
                uninstall = install_signal_handlers(on_signal, give_up_after=3)
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
                self._log_unserved()
                # Gauges and queue depths are read at scrape time, from another thread.
                worker_started(self._parts.metrics, self, blocking_caller(self._parts.store.counts))
                reporting = True
                self._completer.start()
                loops = self._loops
                # Pauses and limits apply from the first claim (then refreshed beside it).
                await loops.refresh_controls(self._parts.store, self._parts.controls)
                helpers.append(spawn(loops.heartbeat))
                poll = self._settings.poll_interval
                helpers.append(spawn(self._dispatcher.start_loop, self._finished, poll))
                if not until_idle:
                    helpers.append(spawn(loops.maintenance, self._parts.maintenance))
                    helpers.append(spawn(loops.counts, self._parts.store))
                    helpers.append(spawn(loops.controls, self._parts.store, self._parts.controls))
                    if self._parts.scheduler:
                        helpers.append(spawn(loops.schedules, self._parts.scheduler))
                    notifier = self._parts.store.notifier()
                    if notifier is not None:
                        await notifier.start()
                        helpers.append(spawn(loops.forward_wakeups, notifier))
                    else:
                        # E.g. a store behind PgBouncer's transaction pooling without a
                        # listen DSN: new jobs wait for the next poll, so say so once.
                        logger.info(
                            "worker %s polls for new jobs every %s s: the store has no "
                            "notifier (LISTEN/NOTIFY)",
                            self._id,
                            poll,
                        )
                self._state = "running"
                self._began = True
                self._serving.set()
                await loops.claim(until_idle=until_idle, stopping=lambda: self._stop_requested)
                self._state = "draining"
                await self._dispatcher.drain(self._drain_timeout, forced=self._cut_short)
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

    def _log_unserved(self) -> None:
        """Name the declared kinds this worker does not claim: their jobs wait for
        another worker, and nothing else would say so (issue 41)."""
        claimed = self._claim_kinds
        if claimed is None:
            return
        unserved = sorted(self._parts.known_kinds - claimed)
        if not unserved:
            return
        missing = [kind for kind in unserved if kind not in self._parts.processors]
        why = []
        if missing:
            why.append(f"no processor here: {', '.join(missing)}")
        if len(missing) < len(unserved):
            left_out = [kind for kind in unserved if kind not in missing]
            why.append(f"left out by its kinds: {', '.join(left_out)}")
        logger.info(
            "worker %s does not serve %d declared kind(s) (%s); their jobs wait for a "
            "worker that does",
            self._id,
            len(unserved),
            "; ".join(why),
        )

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
                left: list[int] | None = []
                try:
                    if self._lease.registered:  # else there is nothing to remove
                        # A store of the older protocol returns None: nothing released.
                        left = list(await self._parts.store.unregister_worker(self._id) or ())
                except Exception:
                    left = None
                    logger.exception("worker %s: unregistering failed", self._id)
                logger.info("%s", self._last_words(left))

    def _last_words(self, left: list[int] | None) -> str:
        """The worker's last log line: what became of the jobs it held at the end.
        ``left``: the jobs its unregistration released (None: it failed)."""
        line = f"worker {self._id} stopped after {self._dispatcher.handled} jobs"
        given_up = set(self._completer.given_up)
        released = [i for i in self._dispatcher.slots.released if i not in given_up]
        if released:
            line += f"; released job(s) {_ids(released)} to pending without using an attempt"
        if left:
            line += (
                f"; job(s) {_ids(left)} still running under its id were released to pending "
                "(attempts unchanged)"
            )
        if left is None:
            line += (
                "; jobs still running under its id stay running until stale-claim "
                "recovery returns them (a live worker's maintenance, once the stale TTL "
                "has passed)"
            )
        return line
