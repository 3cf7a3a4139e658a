"""The loops of a serving worker (async source; ``_loops.py`` is the sync twin):
the claim loop and, beside it, heartbeats, maintenance, periodic schedules and the
notifier's wake-ups (see docs/worker-internals.md, "The worker").
"""

from __future__ import annotations

import logging
import random
import time

# At run time too: the annotations of the attrs class below.
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import attrs

from skiplock._compat_async import ThreadSafeEvent
from skiplock.core import DatabaseUnavailableError
from skiplock.core.rules import next_delay
from skiplock.core.store import WorkerRequest

from ..settings._settings import Settings
from ._completer_async import STORE_RETRY
from ._dispatch_async import Dispatcher
from ._lease_async import LeaseKeeper
from ._timer import wait_until

if TYPE_CHECKING:
    from skiplock.ports import AsyncNotifier, AsyncReadsRole, AsyncUpkeepRole

    from .._controls import ControlsCache
    from .._maintenance_async import Maintenance
    from ..periodic._scheduler_async import Scheduler

logger = logging.getLogger("skiplock.worker")

#: Upper bound of one notifier wait, so a stopping worker's listener notices quickly.
NOTIFIER_WAIT = 0.1

#: Seconds between two folds of the store's count bookkeeping (:meth:`WorkerLoops.counts`).
COUNTS_INTERVAL = 1.0

#: The least lateness after which the worker's scheduler takes a tick for missed (with
#: ``catch_up="skip"``); twice the poll interval when that is longer.
SKIP_LATE_LIMIT = 1.0


@attrs.frozen
class WorkerLoops:
    """The loops one worker runs while it serves, over its lease and dispatcher.

    :meth:`claim` runs until ``stopping()`` (or, ``until_idle``, until nothing is due and
    nothing runs); the others run beside it until ``finished`` is set.
    """

    worker_id: str
    settings: Settings
    lease: LeaseKeeper
    dispatcher: Dispatcher
    finished: ThreadSafeEvent
    #: Called with what an operator asked this worker to do (drain or stop), at each
    #: refresh of the controls that finds a request for it (issue 45).
    on_request: Callable[[WorkerRequest], None] | None = None

    def retry_wait(self, failures: int) -> float:
        """Seconds to wait after ``failures`` store errors in a row (``STORE_RETRY``),
        never longer than the poll interval."""
        delay = next_delay(STORE_RETRY, failures, random.random()).total_seconds()
        return min(delay, self.settings.poll_interval)

    async def claim(self, *, until_idle: bool, stopping: Callable[[], bool]) -> None:
        """Claim whenever there is room, woken by the dispatcher (a notification, a freed
        slot) or by the next-due timer (the next job of this worker's kinds and tenants
        falls due), at most every ``poll_interval``; after store errors retry sooner
        (:meth:`retry_wait`)."""
        dispatcher = self.dispatcher
        poll = self.settings.poll_interval
        failures = 0  # store errors in a row (a failed claim or lease renewal)
        while not stopping():
            dispatcher.wakeup.clear()
            generation = dispatcher.generation()
            # After a store error, or with no recent heartbeat, renew the lease before
            # anything else is claimed (run_until_idle reports store errors instead).
            if not until_idle and self.lease.in_doubt() and not await self.lease.renew():
                failures += 1
                await dispatcher.wakeup.wait(self.retry_wait(failures))
                continue
            try:
                claimed, limit = await dispatcher.claim()
            except Exception as exc:
                self.lease.store_failed()
                if until_idle:
                    raise
                failures += 1
                wait = self.retry_wait(failures)
                if isinstance(exc, DatabaseUnavailableError):  # an outage: one line
                    logger.warning(
                        "worker %s: claim failed: %s; retrying in %.2f s",
                        self.worker_id,
                        exc,
                        wait,
                    )
                else:
                    logger.exception(
                        "worker %s: claim failed; retrying in %.2f s", self.worker_id, wait
                    )
                await dispatcher.wakeup.wait(wait)
                continue
            failures = 0
            if claimed and claimed >= limit:
                continue  # a full batch: more may be due
            if until_idle and not claimed and dispatcher.idle_since(generation):
                return
            # Nothing due that we could take: sleep until the next poll or until the next
            # job of ours falls due, whichever comes first (the next-due timer). Asked
            # after an empty claim only: a claim that took jobs (a busy worker, or the
            # pickup of a job due now) costs no second statement.
            if limit and not claimed and not until_idle:
                await dispatcher.next_due()
            await dispatcher.wakeup.wait(dispatcher.timer.arm(poll, dispatcher.throttled_for))

    async def refresh_controls(self, store: AsyncReadsRole, cache: ControlsCache) -> None:
        """Read the store's pauses and limits into ``cache`` if its snapshot is older than
        ``controls_refresh`` (the engine's workers share it: one of them reads); wake the
        claim loop when they changed. A store error keeps the last snapshot."""
        now = time.monotonic()
        if not cache.due(now, self.settings.controls_refresh):
            return
        try:
            controls = await store.controls()
        except Exception:
            logger.warning(
                "worker %s: reading pauses and limits failed; keeping the last ones",
                self.worker_id,
                exc_info=True,
            )
            return
        cache.update(controls, now)

    async def controls(self, store: AsyncReadsRole, cache: ControlsCache) -> None:
        """Refresh the pauses and limits every ``controls_refresh`` and wake the claim
        loop whenever they changed: a pause applies to the next claim, a resume or a new
        limit makes jobs claimable now. A request to drain or stop this worker goes to
        ``on_request`` (at every refresh while it stands: the worker acts once)."""
        seen = cache.version
        while True:
            await self.refresh_controls(store, cache)
            controls, version = cache.current()
            if version != seen:
                seen = version
                self.dispatcher.wakeup.set()
            request = controls.request_for(self.worker_id)
            if request is not None and self.on_request is not None:
                self.on_request(request)
            if await self.finished.wait(self.settings.controls_refresh):
                return

    async def heartbeat(self) -> None:
        """Renew the lease every ``heartbeat_interval``; after each good heartbeat the
        store counts the attempts of jobs that started without a round trip."""
        interval = self.settings.heartbeat_interval
        while not await self.finished.wait(interval):
            if await self.lease.renew(always=True):
                await self.dispatcher.slots.pay()

    async def maintenance(self, maintenance: Maintenance) -> None:
        """Run ``maintenance`` every ``maintenance_interval`` (once per period in the
        cluster, J13)."""
        while True:
            # Our own heartbeat first: after an outage, maintenance must not take this
            # live worker's jobs for stale.
            if await self.lease.renew():
                try:
                    await maintenance.run(once_per_period=True)
                except Exception:
                    logger.exception("worker %s: maintenance failed", self.worker_id)
            if await self.finished.wait(self.settings.maintenance_interval):
                return

    async def counts(self, store: AsyncUpkeepRole) -> None:
        """Fold the store's count bookkeeping every ``COUNTS_INTERVAL`` seconds
        (``store.roll_up_counts``; one session of the cluster at a time), so operator reads
        stay cheap under any write rate."""
        while not await self.finished.wait(COUNTS_INTERVAL):
            try:
                await store.roll_up_counts()
            except Exception:
                logger.warning(
                    "worker %s: folding job counts failed", self.worker_id, exc_info=True
                )

    async def schedules(self, scheduler: Scheduler) -> None:
        """Enqueue the periodic schedules' due ticks, at each tick."""
        # Every worker of an engine with schedules runs them: a tick's idempotency key
        # makes the racing passes create one job, and no worker waits for a leader.
        # Woken at the next tick, or after poll_interval at most (the store's clock may
        # run apart from ours, or be a test's fake one).
        # A pass that finds a tick later than late_limit finds it missed: the scheduler
        # did not run at its time (it stalled, or the store was down), and catch_up="skip"
        # leaves it out. On time, a pass runs within a poll interval of each tick.
        poll = self.settings.poll_interval
        late_limit = timedelta(seconds=max(2 * poll, SKIP_LATE_LIMIT))
        failures = 0
        while True:
            try:
                _, until_next = await scheduler.run_pass(late_limit=late_limit)
                failures = 0
                wait = wait_until(poll, None if until_next is None else until_next.total_seconds())
            except Exception:
                failures += 1
                wait = self.retry_wait(failures)
                logger.exception(
                    "worker %s: reading the store's clock for schedules failed; retrying in %.2f s",
                    self.worker_id,
                    wait,
                )
            if await self.finished.wait(wait):
                return

    async def forward_wakeups(self, notifier: AsyncNotifier) -> None:
        """Wake the dispatcher on each of the notifier's wake-ups."""
        wakeup, timer = self.dispatcher.wakeup, self.dispatcher.timer
        wait = min(self.settings.poll_interval, NOTIFIER_WAIT)
        # Every job that becomes pending notifies (due now or later): until a
        # notification, the next-due time the store gave stays true.
        timer.listening()
        while not self.finished.is_set():
            try:
                if await notifier.wait(wait):
                    timer.notified()
                    wakeup.set()
            except Exception:
                logger.exception("worker %s: notifier failed; polling meanwhile", self.worker_id)
                timer.notified()
                await self.finished.wait(self.settings.poll_interval)
