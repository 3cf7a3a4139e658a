"""The scheduler: enqueues the due ticks of an engine's periodic schedules (async source;
``_scheduler.py`` is the sync twin).

One per engine, shared by its workers in the process (each runs a loop calling
:meth:`Scheduler.run_pass`, see docs/periodic.md). Due times are on the store's clock, like
every job's ``available_at``; a tick's idempotency key makes the passes of any number of
workers create one job per tick.
"""

from __future__ import annotations

import logging
from datetime import datetime
from threading import Lock
from typing import TYPE_CHECKING

import attrs

from skiplock.core import ValidationError

from ._rules import Cron, Interval, ScheduleInfo, TickResult, zone_name

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import timedelta

    from skiplock.core import EnqueueRequest
    from skiplock.ports import AsyncAudit, AsyncJobsRole

    from .._inputs import Enqueue
    from ._rules import Schedule

logger = logging.getLogger("skiplock.periodic")


@attrs.define
class _State:
    """What this process knows of one schedule."""

    #: Ticks up to here were handled: the store time of the last pass that handled the
    #: schedule (before the first one, :meth:`Schedule.first_after`).
    after: datetime | None = None
    last_tick: datetime | None = None
    last_job_id: int | None = None


class Scheduler:
    """Holds an engine's schedules and enqueues their due ticks.

    ``build`` validates enqueues as the engine's ``enqueue`` does (kinds, payloads,
    defaults) and returns the store requests; ``retention()`` is the engine's
    current ``Settings.retention``, the oldest a tick may be and still be enqueued;
    ``audit()`` the engine's current audit of enqueues (J10), None while it is off.
    """

    def __init__(
        self,
        store: AsyncJobsRole,
        build: Callable[[Sequence[Enqueue]], Sequence[EnqueueRequest]],
        retention: Callable[[], timedelta | None],
        audit: Callable[[], AsyncAudit | None] = lambda: None,
    ) -> None:
        self._store = store
        self._build = build
        self._retention = retention
        self._audit = audit
        self._schedules: dict[str, Schedule] = {}
        self._states: dict[str, _State] = {}
        self._lock = Lock()  # the sync flavour's workers are threads

    def __bool__(self) -> bool:
        return bool(self._schedules)

    def add(self, schedule: Schedule) -> None:
        """Add ``schedule``; ValidationError if its name is taken."""
        with self._lock:
            if schedule.name in self._schedules:
                raise ValidationError(
                    f"a schedule named {schedule.name!r} exists already; give this one "
                    "another name= (the name is part of every tick's idempotency key)"
                )
            self._schedules[schedule.name] = schedule
            self._states[schedule.name] = _State()

    def schedules(self) -> list[Schedule]:
        """The schedules, in declaration order."""
        with self._lock:
            return list(self._schedules.values())

    async def run_pass(
        self, *, late_limit: timedelta | None = None
    ) -> tuple[list[TickResult], timedelta | None]:
        """Enqueue every schedule's due ticks (at the store's now).

        ``late_limit`` (a worker's loop, which runs a pass at every tick): a tick older
        than this at the pass was missed — the loop did not run at its time — and
        ``catch_up="skip"`` enqueues none such (:meth:`Schedule.due`). None (a pass run
        by hand, ``enqueue_due_ticks``): every tick since the previous pass counts.

        Returns the ticks enqueued (or found enqueued) and the time from the store's now
        to the earliest next tick of all schedules (None: no schedule fires again). A
        schedule whose enqueue fails is logged and tried again by the next pass (its
        window of ticks is kept); the others go on. Raises only if the store's clock
        cannot be read.
        """
        schedules = self.schedules()
        if not schedules:
            return [], None
        now = await self._store.now()
        results: list[TickResult] = []
        upcoming: datetime | None = None
        for schedule in schedules:
            with self._lock:
                state = self._states[schedule.name]
                if state.after is None:
                    # Kept if this pass fails: "skip" still counts from the first pass.
                    state.after = schedule.first_after(now)
                after = state.after
            ticks = schedule.due(now, after, self._retention(), late_limit=late_limit)
            try:
                if ticks:
                    results.extend(await self._enqueue(schedule, ticks))
            except Exception:
                logger.exception(
                    "schedule %r: enqueueing the tick(s) %s failed; the next pass tries again",
                    schedule.name,
                    ", ".join(tick.isoformat() for tick in ticks),
                )
            else:
                with self._lock:
                    state = self._states[schedule.name]
                    if state.after is None or state.after < now:
                        state.after = now
            following = schedule.timetable.next_after(now)
            if following is not None and (upcoming is None or following < upcoming):
                upcoming = following
        return results, None if upcoming is None else upcoming - now

    async def _enqueue(self, schedule: Schedule, ticks: list[datetime]) -> list[TickResult]:
        requests = self._build([schedule.tick_item(tick) for tick in ticks])
        enqueued = await self._store.enqueue(requests, audit=self._audit())
        results = [
            TickResult(
                schedule=schedule.name,
                kind=schedule.kind,
                tick=tick,
                job_id=result.id,
                created=result.created,
            )
            for tick, result in zip(ticks, enqueued, strict=True)
        ]
        for result in results:
            if result.created:
                logger.debug(
                    "schedule %r: tick %s enqueued as job %d",
                    schedule.name,
                    result.tick.isoformat(),
                    result.job_id,
                )
        with self._lock:
            state = self._states[schedule.name]
            last = results[-1]
            if state.last_tick is None or state.last_tick <= last.tick:
                state.last_tick = last.tick
                state.last_job_id = last.job_id
        return results

    async def infos(self) -> list[ScheduleInfo]:
        """Every schedule as :class:`ScheduleInfo`, next ticks from the store's now."""
        schedules = self.schedules()
        now = await self._store.now() if schedules else None
        infos = []
        for schedule in schedules:
            assert now is not None
            timetable = schedule.timetable
            with self._lock:
                state = attrs.evolve(self._states[schedule.name])
            item = schedule.item
            infos.append(
                ScheduleInfo(
                    name=schedule.name,
                    kind=schedule.kind,
                    cron=timetable.expr if isinstance(timetable, Cron) else None,
                    every=timetable.every if isinstance(timetable, Interval) else None,
                    tz=zone_name(timetable.tz) if isinstance(timetable, Cron) else None,
                    catch_up=schedule.catch_up,
                    payload=item.payload,
                    priority=item.priority,
                    tenant=item.tenant,
                    max_attempts=item.max_attempts,
                    next_tick=timetable.next_after(now),
                    last_tick=state.last_tick,
                    last_job_id=state.last_job_id,
                )
            )
        return infos
