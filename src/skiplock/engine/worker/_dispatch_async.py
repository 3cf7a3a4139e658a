"""Dispatch: plan claims, keep the prefetch buffer, start jobs in free slots (async
source; ``_dispatch.py`` is the sync twin).

A claim takes jobs for the free slots, which start at once and pay their attempt in the
claim, plus up to ``prefetch`` more that are *held*: running under the worker in the
store but not started and not charged. A held job starts as soon as a slot frees, without
a round trip, while the lease is sound; its outcome (or the next heartbeat) pays for it,
so a worker that dies with a full buffer costs the jobs it never started nothing. A
recovered job is paid for with ``store.start`` before it runs (fenced: a job taken away
meanwhile never runs here), and a suspect (recovered while it was running) starts alone,
so a job that kills its worker takes no innocent job's attempt with it. Claims are also
bounded by what the completer has not written yet (backpressure): the jobs held plus the
outcomes waiting never exceed the scope's ``unwritten_limit``.
"""

from __future__ import annotations

import logging
from threading import Lock
from typing import TYPE_CHECKING

from skiplock._compat_async import ThreadSafeEvent, spawn
from skiplock.core import Release
from skiplock.core.store import ClaimedJobs

from ._completer_async import Done
from ._held import HeldJobs
from ._planner import ClaimPace, ClaimPlanner
from ._runner_async import LOST
from ._slots_async import Slots
from ._timer import DueTimer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from skiplock.core import ClaimRequest, Job
    from skiplock.ports import AsyncAudit, Clock, Metrics, Tracer

    from .._controls import LimitsView
    from .._limits import NodeSlots, RateLimiter
    from ._completer_async import Completer
    from ._lease_async import LeaseKeeper
    from ._runner_async import JobRunner
    from ._scope import ClaimScope
    from ._stores_async import AsyncClaimStore

logger = logging.getLogger("skiplock.worker")


class Dispatcher:
    """Plans claims, keeps the buffer of held jobs and starts jobs in free slots.

    Its state sits under one plain lock, never held across an await. ``wakeup`` is set
    whenever the worker's loop may have something to do (a slot freed, a job dropped);
    ``startable`` whenever held jobs may start.
    """

    def __init__(
        self,
        scope: ClaimScope,
        *,
        store: AsyncClaimStore,
        runner: JobRunner,
        completer: Completer,
        lease: LeaseKeeper,
        node_slots: NodeSlots,
        limiter: RateLimiter,
        limits: LimitsView,
        clock: Clock,
        metrics: Metrics,
        tracer: Tracer,
        audit: AsyncAudit | None = None,
    ) -> None:
        self._scope = scope
        self._store = store
        # A claim audits the rows it buries as undecodable (J10).
        self._audit = audit
        self._completer = completer
        self._lease = lease
        self._node_slots = node_slots
        self._limits = limits
        self._planner = ClaimPlanner(
            scope,
            node_slots=node_slots,
            limiter=limiter,
            limits=limits,
            clock=clock,
            metrics=metrics,
        )
        # How many jobs to hold, and when to claim again while some are (under the lock).
        self._pace = ClaimPace(scope.prefetch, ceiling=scope.prefetch_ceiling)
        self.wakeup = ThreadSafeEvent()
        self.startable = ThreadSafeEvent()
        # When the next job this worker may claim falls due (the claim loop sleeps until
        # then at most).
        self.timer = DueTimer(clock)
        self.slots = Slots(
            worker_id=scope.worker_id,
            store=store,
            on_store_error=lease.store_failed,
            runner=runner,
            completer=completer,
            node_slots=node_slots,
            clock=clock,
            tracer=tracer,
            on_entered=self._on_entered,
            on_finished=self._on_finished,
            on_later=self.timer.expect,
        )
        self._lock = Lock()
        self._held = HeldJobs()
        # Set whenever a start batch's store.start returned (its jobs stopped starting).
        self._confirmed = ThreadSafeEvent()
        self._stopping = False
        # Jobs let go (taken from the held buffer) whose outcome is not queued yet: still
        # held for the heartbeat, which would otherwise release them (recovered, instead
        # of the release the outcome writes) in between.
        self._letting_go: set[int] = set()
        self._handled = 0
        # Jobs claimed so far: each is handled once (run, dropped or released).
        self._claimed = 0
        self._changes = 0

    # ---- state ----------------------------------------------------------------------

    @property
    def throttled_for(self) -> float | None:
        """Seconds until a throttled pair or provider has a token again (None: none)."""
        return self._planner.throttled_for

    @property
    def handled(self) -> int:
        """Claimed jobs handled so far (any outcome, dropped ones included)."""
        with self._lock:
            return self._handled

    @property
    def held(self) -> int:
        """Claimed jobs not running yet: prefetched, being started, or a suspect waiting
        for quiet."""
        with self._lock:
            return len(self._held)

    def held_ids(self) -> list[int]:
        """Every job this worker holds: running, held, being started, or its outcome not
        written yet (the heartbeat releases a running job of this worker not among them)."""
        with self._lock:
            held = {*self.slots.ids(), *self._held.ids(), *self._letting_go}
        # Read after the slots and the jobs let go: a job leaves them only once its
        # outcome is queued.
        return sorted(held | self._completer.unsettled_ids())

    def generation(self) -> tuple[int, int]:
        """Changes so far (finished or dropped jobs, written outcomes)."""
        with self._lock:
            return self._changes, self._completer.written_batches

    def idle_since(self, generation: tuple[int, int]) -> bool:
        """Every claimed job handled, no outcome waiting, and nothing finished or written
        since ``generation`` (either may have made another job due)."""
        with self._lock:
            # Counted, not looked for: a job that left its slot is handled only once its
            # slot reported it (sync flavour: another thread, a moment later).
            empty = self._handled == self._claimed and not self._held.reserved
        return empty and not self._completer.busy and self.generation() == generation

    def _busy(self) -> int:
        # Under the lock: slots taken or promised.
        return len(self.slots) + self._held.promised()

    def _free(self) -> int:
        # Under the lock: slots neither taken nor promised.
        return self._scope.concurrency - self._busy()

    # ---- claiming -------------------------------------------------------------------

    async def claim(self) -> tuple[int, int]:
        """Claim what the free slots and the buffer can take; returns (claimed, limit)."""
        scope = self._scope
        with self._lock:
            if self._stopping:
                return 0, 0
            # With jobs held, claim again only once they would last just a few claim
            # round trips (ClaimPace): a finished job does not cost a claim of one, and
            # the next claim returns before the slots run dry. With no prefetch the
            # buffer is always empty.
            pace = self._pace
            if not pace.due(self._held.queued, self._handled):
                return 0, 0
            held = self._busy() + self._held.queued
            # Backpressure: every job held here ends as an outcome for the completer, so
            # held jobs plus unwritten outcomes stay within the limit. A store that writes
            # slowly slows claiming instead of letting outcomes pile up; starting a held
            # job needs no room (it was counted when claimed), so nothing ever waits.
            free = min(
                scope.concurrency + pace.buffer() - held,
                scope.unwritten_limit - held - self._completer.unwritten,
            )
            # While a suspect runs alone, claimed jobs are only held. The slots of jobs
            # that start at once are reserved now, before anything else can take them.
            start_now = 0
            if self._held.isolated is None:
                start_now = max(0, min(scope.concurrency - held, free))
            self._held.reserved += start_now
        # A heartbeat releases this worker's running jobs it does not list: none may be
        # in flight while a claim is, nor before the claim's jobs are placed.
        try:
            await self._lease.gate.acquire()
        except BaseException:
            with self._lock:
                self._held.reserved -= start_now
            raise
        try:
            return await self._claim_reserved(free, start_now)
        finally:
            self._lease.gate.release()

    async def _claim_reserved(self, free: int, start_now: int) -> tuple[int, int]:
        # claim(), once ``start_now`` slots are reserved and heartbeats wait.
        pace = self._pace
        try:
            plan = self._planner.plan(free, start_now)
            if plan is None:
                jobs = ClaimedJobs()
            else:
                pace.sent()
                try:
                    jobs = await self._claim(plan)
                finally:
                    with self._lock:
                        pace.returned(self._handled)
        except BaseException:
            with self._lock:
                self._held.reserved -= start_now
            raise
        if plan is None:
            with self._lock:
                self._held.reserved -= start_now
            return 0, 0
        self._planner.claimed(plan, jobs)
        # The store says which it charged (claim order) and held the rest: read, never
        # decided again here. A charged suspect (charged alone) waits until the running
        # jobs are under way, then runs alone.
        charged = jobs.charged
        direct = [job for job in jobs if job.id in charged]
        # A freeze before the statement lets it run once this worker's row is gone (no
        # heartbeat then): jobs taken back while they run. In doubt, release them unrun.
        unrun = direct if self._lease.in_doubt() else []
        if unrun:
            direct = []
            logger.warning(
                "worker %s: its lease fell in doubt while a claim was in flight (a freeze?);"
                " releasing %d charged job(s) unrun",
                self._scope.worker_id,
                len(unrun),
            )
        with self._lock:
            self._claimed += len(jobs)
            if len(direct) == 1 and direct[0].suspect:
                self._held.hold_charged_suspect(direct[0])
                direct = []
        placed = 0
        try:
            for job in direct:
                self.slots.start(job)
                placed += 1
        finally:
            unplaced = unrun + direct[placed:]
            with self._lock:
                # The reservation ends, and the held jobs are seen, only once the charged
                # jobs took their slots: else a slot's thread or the start loop (sync
                # flavour) could start a held job in one of them, more jobs than slots.
                # Also when a start failed (no thread to be had): nothing stays reserved.
                self._held.reserved -= start_now
                self._held.hold(jobs.held())
                self._count_dropped(len(unplaced))
                # Held jobs take free slots at once (as when a slot frees), not only once
                # the start loop gets its turn; what must be paid for first is left to it.
                if self._may_start():
                    self._start_unpaid()
                waiting = self._held.waiting()
            # A charged job that found no slot gives its attempt back and is released.
            for job in unplaced:
                self._release(job, refund=True)
        if waiting:
            self.startable.set()
        return len(jobs), plan.limit

    async def next_due(self) -> None:
        """Ask the store when the next job of this worker's kinds and tenants falls due,
        if :attr:`timer` needs to know; a store error leaves it unknown (the loop polls)."""
        timer = self.timer
        token = timer.query()
        if token is None:
            return
        # Paused kinds are left out: their jobs falling due would wake the worker for a
        # claim that cannot take them.
        kinds = self._scope.kinds
        if kinds is not None:
            kinds = kinds - self._limits.current()[0].exclusions().kinds
            if not kinds:
                timer.learned(None, token)
                return
        try:
            due = await self._store.next_due(kinds, self._scope.tenants)
        except Exception:
            logger.debug(
                "worker %s: next_due failed; polling", self._scope.worker_id, exc_info=True
            )
            timer.unknown()
        else:
            timer.learned(due, token)

    async def _claim(self, plan: ClaimRequest) -> ClaimedJobs:
        return await self._store.claim(plan, audit=self._audit)

    # ---- starting held jobs ---------------------------------------------------------

    async def start_held(self) -> bool:
        """Start held jobs in the free slots: at once, or — a recovered job — once
        ``store.start`` confirmed it is still this worker's. False when there was nothing
        to start (or it cannot be done now).

        A suspect starts alone: only once every running job has entered its processor
        and no other start or direct claim is in flight, and nothing else starts until it
        finished — if it kills the worker, no innocent job was charged for it.
        """
        # No held job starts while the lease is in doubt: it may have been recovered (and
        # a renewal that finds the registration gone drops every held job).
        if self._lease.in_doubt() and not await self._lease.renew():
            return False
        with self._lock:
            if self._stopping:
                return False
            held, ready = self._held, self._held.ready
            if ready is not None:
                if not self._quiet():
                    return False  # a charged suspect waits for quiet
                held.ready = None
                self.slots.start(ready)  # in its slot before the lock is free (see _confirm)
                return True
            before = held.queued
            # Never-recovered jobs start at once; recovered ones are paid for first.
            self._start_unpaid()
            jobs = held.take_to_confirm(self._free(), self._quiet)
            if not jobs:
                return held.queued < before  # some started without a round trip
        # Confirmed on its own task (thread), so the next free slots need not wait for
        # this round trip: starts overlap, and each batch takes what is free right then.
        spawn(self._confirm, jobs)
        return True

    async def _confirm(self, jobs: list[Job]) -> None:
        try:
            try:
                confirmed = await self._store.start([job.lease for job in jobs])
            except Exception:
                self._lease.store_failed()
                logger.exception(
                    "worker %s: starting %d held job(s) failed", self._scope.worker_id, len(jobs)
                )
                self._unstart(jobs)
                return
            with self._lock:
                started, gone = self._held.confirmed(jobs, confirmed)
                self._count_dropped(len(gone))
                # Into their slots before the lock is free: a job no longer starting but
                # not in a slot yet would be counted by neither _free() nor drain().
                for job in started:
                    self.slots.start(job)
            self._forget(gone)
        finally:
            self._confirmed.set()
            self.startable.set()

    def _may_start(self) -> bool:
        # Under the lock: held jobs may start without the start loop (not stopping, and
        # no doubt about the lease that the loop would first have to renew).
        return not self._stopping and not self._lease.in_doubt()

    def _start_unpaid(self) -> None:
        # Under the lock: start the leading held jobs that were never recovered in the free
        # slots, without a round trip (their outcome, or the next heartbeat, pays for them).
        for job in self._held.take_unpaid(self._free()):
            self.slots.start(job, paid=False)

    def _quiet(self) -> bool:
        # Under the lock: every running job entered its processor and nothing else is
        # being charged, so a suspect started now cannot take an innocent job with it.
        held = self._held
        return not held.starting and not held.reserved and self.slots.all_entered()

    def _unstart(self, jobs: list[Job]) -> None:
        with self._lock:
            self._held.unstart(jobs)

    async def start_loop(self, finished: ThreadSafeEvent, poll_interval: float) -> None:
        """Start held jobs whenever slots free up, until ``finished`` is set."""
        while not finished.is_set():
            self.startable.clear()
            if not await self.start_held():
                await self.startable.wait(poll_interval)

    def _on_entered(self) -> None:
        with self._lock:
            waiting = self._held.suspect_waits()
        if waiting:
            self.startable.set()

    def _on_finished(self, job: Job) -> None:
        with self._lock:
            self._handled += 1
            self._changes += 1
            held = self._held
            alone = held.finished(job.id)
            # The next held job takes the slot at once, in this task (thread), unless the
            # lease is in doubt or the job must be paid for first: then the start loop.
            waiting = bool(held.queued)
            if waiting and self._may_start():
                self._start_unpaid()
                waiting = bool(held.queued) and len(self.slots) < self._scope.concurrency
            ready = held.ready is not None
        if waiting or alone or ready:
            self.startable.set()
        self.wakeup.set()

    # ---- letting jobs go ------------------------------------------------------------

    def drop(self, ids: Iterable[int] | None) -> None:
        """Stop the jobs that are no longer this worker's (``None``: every job): interrupt
        the running ones, forget the held ones; nothing is written for them (R13)."""
        wanted = None if ids is None else set(ids)
        with self._lock:
            dropped = self._held.drop(wanted)
            self._count_dropped(len(dropped))
        self._forget(dropped)
        self.slots.drop(wanted)

    def _count_dropped(self, n: int) -> None:
        # Under the lock.
        if n:
            self._handled += n
            self._changes += 1

    def _forget(self, jobs: list[Job]) -> None:
        for job in jobs:
            logger.warning(
                "worker %s: held job %d (%s) is no longer ours (recovered, cancelled or "
                "deleted); it will not start here",
                self._scope.worker_id,
                job.id,
                job.kind,
            )
            self._node_slots.release(job.kind)
            self._completer.report(job, LOST.label, 0.0)
        if jobs:
            self.wakeup.set()  # the buffer has room again

    def stop_starting(self) -> None:
        """A stop began: claim and start nothing more (the drain releases the held jobs)."""
        with self._lock:
            self._stopping = True

    async def drain(self, timeout: float, *, forced: Callable[[], bool]) -> None:
        """Shutdown: start nothing more, give the held jobs back to ``pending`` without
        using an attempt (they never had one; written by the completer), then let the
        running ones finish (see :meth:`Slots.drain`)."""
        with self._lock:
            self._stopping = True
            # A suspect a claim charged but that never started gives its attempt back.
            jobs, ready = self._held.release_all()
            self._count_dropped(len(jobs) + (ready is not None))
            self._letting_go.update(job.id for job in (*jobs, *([ready] if ready else [])))
        self.startable.set()
        if ready is not None:
            self._release(ready, refund=True)
        if jobs:
            logger.info(
                "worker %s: releasing %d held job(s) that did not start",
                self._scope.worker_id,
                len(jobs),
            )
        for job in jobs:
            self._release(job, refund=False)
        # Jobs whose start is in flight become running (or are dropped) first.
        while True:
            self._confirmed.clear()
            with self._lock:
                if not self._held.starting:
                    break
            await self._confirmed.wait(0.1)
        await self.slots.drain(timeout, forced=forced)

    def _release(self, job: Job, *, refund: bool) -> None:
        done = Done(job, Release(refund=refund), 0.0)
        if not self._completer.submit(done):
            self._completer.report(job, "error", 0.0)
            self._node_slots.release(job.kind)
        with self._lock:  # queued (or given up): no longer let go
            self._letting_go.discard(job.id)
