"""Periodic schedules: when a kind's ticks fall, and which ticks one scheduler pass
enqueues (see docs/periodic.md). Pure: no I/O; :mod:`._scheduler_async` runs the passes.

A tick's job carries the idempotency key ``periodic:<name>:<tick in UTC, ISO 8601>``: every
process computes the same ticks, so the workers racing on one tick create one job.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from skiplock.core import ValidationError
from skiplock.core.rules import KIND_RE, check_kind
from skiplock.core.store import shown

from .._inputs import Enqueue

if TYPE_CHECKING:
    from collections.abc import Iterator

#: ``"latest"`` (default): of the ticks missed, only the most recent; ``"skip"``: none; an
#: int N: up to the N most recent (see :meth:`AsyncEngine.periodic`).
CatchUp: TypeAlias = Literal["latest", "skip"] | int


class ScheduleOptions(TypedDict, total=False):
    """The keyword options of a schedule, as :meth:`AsyncEngine.periodic` takes them:
    when it ticks (``cron`` or ``every``, ``tz``), its tick jobs' ``priority``, ``tenant``
    and ``max_attempts``, its ``name`` and ``catch_up``; ``task.periodic(payload,
    **options)`` takes them too."""

    cron: str | None
    every: timedelta | float | None
    tz: str | tzinfo | None
    priority: int | None
    tenant: str | None
    max_attempts: int | None
    name: str | None
    catch_up: CatchUp


#: Prefix of every tick's idempotency key.
KEY_PREFIX = "periodic:"
#: Shortest interval: faster schedules belong in a loop of their own, not in job rows.
MIN_INTERVAL = timedelta(seconds=1)
#: Most ticks one pass enqueues for one schedule (``catch_up=N``).
MAX_CATCH_UP = 1000
#: Interval ticks are multiples of the interval counted from here, so every process
#: computes the same ticks whenever it started.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_SECOND = timedelta(seconds=1)
_TINY = timedelta(microseconds=1)


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of ``name``'s job for ``tick``."""
    return f"{KEY_PREFIX}{name}:{tick.astimezone(UTC).isoformat()}"


@attrs.frozen
class Interval:
    """Ticks every ``every``, at whole multiples of it since the Unix epoch (UTC)."""

    every: timedelta

    def latest(self, now: datetime) -> datetime | None:
        """The most recent tick at or before ``now``."""
        return EPOCH + ((now - EPOCH) // self.every) * self.every

    def previous(self, tick: datetime) -> datetime | None:
        """The tick before ``tick``."""
        return tick - self.every

    def next_after(self, when: datetime) -> datetime | None:
        """The first tick after ``when``."""
        latest = self.latest(when)
        return None if latest is None else latest + self.every


@attrs.frozen
class Cron:
    """Ticks of a cron expression (cronsim: 5 fields, or 6 with seconds first), evaluated
    in ``tz``."""

    expr: str
    tz: tzinfo

    def latest(self, now: datetime) -> datetime | None:
        """The most recent tick at or before ``now``."""
        # Ticks are whole seconds; a reverse walk yields times strictly before its start.
        return self._before(now.replace(microsecond=0) + _SECOND)

    def previous(self, tick: datetime) -> datetime | None:
        """The tick before ``tick``."""
        return self._before(tick)

    def _before(self, when: datetime) -> datetime | None:
        # The forward walk is the schedule (Debian cron's); a reverse one can land a day
        # early near a daylight saving change (a local time that occurs twice), so it only
        # gives a start for walking forward.
        tick = _first(self._walk(when, reverse=True))
        while tick is not None and (following := self.next_after(tick)) is not None:
            if following >= when:
                break
            tick = following
        return tick

    def next_after(self, when: datetime) -> datetime | None:
        """The first tick after ``when``."""
        return _first(self._walk(when, reverse=False))

    def _walk(self, start: datetime, *, reverse: bool) -> Iterator[datetime]:
        from cronsim import CronSim  # checked by cron_timetable

        return iter(CronSim(self.expr, start.astimezone(self.tz), reverse=reverse))


def _first(ticks: Iterator[datetime]) -> datetime | None:
    # cronsim stops after 50 years without a match.
    tick = next(ticks, None)
    return None if tick is None else tick.astimezone(UTC)


Timetable: TypeAlias = Interval | Cron


@attrs.frozen
class Schedule:
    """One declared schedule (built and validated by :func:`build_schedule`)."""

    name: str
    kind: str
    timetable: Timetable
    #: The tick jobs' enqueue, without ``idempotency_key`` and ``available_at``.
    item: Enqueue
    catch_up: CatchUp

    def tick_item(self, tick: datetime) -> Enqueue:
        """The enqueue of ``tick``'s job: keyed by the tick, due at it. A tick's job is
        never replaced: every scheduler pass enqueues it again, and ``ignore`` keeps that
        a no-op whatever the kind's ``idempotency_conflict``."""
        return attrs.evolve(
            self.item,
            idempotency_key=tick_key(self.name, tick),
            available_at=tick,
            idempotency_conflict="ignore",
        )

    def first_after(self, now: datetime) -> datetime | None:
        """``after`` for the first pass at ``now`` (see :meth:`due`): None, every tick up to
        now counts as missed; with ``catch_up="skip"`` only ticks from ``now`` on count."""
        return now - _TINY if self.catch_up == "skip" else None

    def due(
        self,
        now: datetime,
        after: datetime | None,
        retention: timedelta | None,
        *,
        late_limit: timedelta | None = None,
    ) -> list[datetime]:
        """The ticks a pass at ``now`` enqueues, oldest first.

        ``after``: ticks up to it were handled (the store time of this process's previous
        pass, else :meth:`first_after`). Of the ticks after it and at or before ``now``
        the most recent, or with ``catch_up=N`` up to N most recent, none older than
        ``retention``: a job of such a tick is still in the store if it was ever created
        (retention purges a succeeded job only ``retention`` after it completed, which
        is after its tick), so its key dedupes it; older ticks are never enqueued again.
        With ``catch_up="skip"`` and a ``late_limit``, none older than that either: such
        a tick was missed (no pass ran at its time: downtime, or a stalled worker).
        """
        limit = self.catch_up if isinstance(self.catch_up, int) else 1
        floor = None if retention is None else now - retention
        if self.catch_up == "skip" and late_limit is not None:
            late = now - late_limit
            floor = late if floor is None else max(floor, late)
        ticks: list[datetime] = []
        tick = self.timetable.latest(now)
        while (
            tick is not None
            and len(ticks) < limit
            and (after is None or tick > after)
            and (floor is None or tick >= floor)
        ):
            ticks.append(tick)
            tick = self.timetable.previous(tick)
        ticks.reverse()
        return ticks


def interval_timetable(every: object) -> Interval:
    """``every`` (a timedelta or seconds) as an :class:`Interval`; ValidationError if it is
    not a finite duration of at least :data:`MIN_INTERVAL`."""
    value = every
    if not isinstance(value, bool) and isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValidationError(f"every must be a finite number of seconds, got {value!r}")
        try:
            value = timedelta(seconds=value)
        except OverflowError:
            raise ValidationError(f"every out of range: {every!r}") from None
    if not isinstance(value, timedelta):
        raise ValidationError(f"every must be a timedelta or seconds, got {shown(every)}")
    if value < MIN_INTERVAL:
        raise ValidationError(
            f"every must be at least {MIN_INTERVAL.total_seconds():g} s, got {value} "
            "(a non-positive interval never ticks; sub-second ones belong in a loop)"
        )
    return Interval(value)


def cron_timetable(cron: object, tz: object, now: datetime) -> Cron:
    """``cron`` in time zone ``tz`` (None: UTC) as a :class:`Cron`; ValidationError if the
    expression or the zone is bad, or the expression never fires after ``now``."""
    try:
        from cronsim import CronSimError
    except ImportError:
        raise ImportError(
            "cron schedules need the cronsim library: pip install 'skiplock[cron]' "
            "(or use every= for a plain interval)"
        ) from None
    if not isinstance(cron, str):
        raise ValidationError(f"cron must be a str, got {shown(cron)}")
    timetable = Cron(cron, as_zone(tz))
    try:
        upcoming = timetable.next_after(now)
    except CronSimError as exc:
        raise ValidationError(f"invalid cron expression {cron!r}: {exc}") from None
    if upcoming is None:
        raise ValidationError(f"cron expression {cron!r} never fires (none in 50 years)")
    return timetable


def as_zone(tz: object) -> tzinfo:
    """A zoneinfo key (``"Europe/Paris"``) or a tzinfo as a tzinfo; None is UTC."""
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise ValidationError(f"tz must be a zoneinfo key or a tzinfo, got {shown(tz)}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"unknown time zone {tz!r} (a zoneinfo key such as 'UTC')") from None


def check_catch_up(catch_up: object) -> CatchUp:
    """Return ``catch_up`` if it is ``"latest"``, ``"skip"`` or an int in
    1..:data:`MAX_CATCH_UP`, else raise."""
    match catch_up:
        case "latest" | "skip":
            return catch_up
        case bool():  # an int, but surely not meant as a count
            pass
        case int() if 1 <= catch_up <= MAX_CATCH_UP:
            return catch_up
    raise ValidationError(
        f"catch_up must be 'latest', 'skip' or an int from 1 to {MAX_CATCH_UP}, "
        f"got {shown(catch_up)}"
    )


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid schedule name (as a kind), else raise."""
    if not isinstance(name, str) or KIND_RE.fullmatch(name) is None:
        raise ValidationError(
            f"invalid schedule name {shown(name)}: must be a str matching {KIND_RE.pattern}"
        )
    return name


def build_schedule(
    kind: str,
    *,
    cron: object,
    every: object,
    tz: object,
    name: object,
    catch_up: object,
    item: Enqueue,
    now: datetime,
) -> Schedule:
    """Validate a declaration (``item``: the tick jobs' enqueue, validated by the caller)."""
    check_kind(kind)
    if (cron is None) == (every is None):
        raise ValidationError("a schedule needs exactly one of cron= and every=")
    timetable: Timetable
    if every is not None:
        if tz is not None:
            raise ValidationError(
                "tz applies to cron schedules only; intervals count from the Unix epoch"
            )
        timetable = interval_timetable(every)
        try:
            timetable.next_after(now)
        except OverflowError:
            raise ValidationError(f"every out of range: {every!r} (no tick before 9999)") from None
    else:
        timetable = cron_timetable(cron, tz, now)
    return Schedule(
        name=kind if name is None else check_name(name),
        kind=kind,
        timetable=timetable,
        item=item,
        catch_up=check_catch_up(catch_up),
    )


def zone_name(tz: tzinfo) -> str:
    """A zone's key (``Europe/Paris``) or name (``UTC``)."""
    if isinstance(tz, ZoneInfo):
        return tz.key
    return tz.tzname(None) or str(tz)


@attrs.frozen
class ScheduleInfo:
    """A schedule as :meth:`AsyncEngine.schedules` shows it.

    ``cron`` (with ``tz``) or ``every`` says when it ticks; ``payload``, ``priority``,
    ``tenant`` and ``max_attempts`` are its jobs' fields as declared (None: the kind's
    default); ``next_tick`` is the first tick
    after the store's now (None if a cron expression fires no more). ``last_tick`` and
    ``last_job_id`` are the most recent tick this process's scheduler enqueued (or found
    enqueued by another process) and its job; None until it handled one.
    """

    name: str
    kind: str
    cron: str | None
    every: timedelta | None
    tz: str | None
    catch_up: CatchUp
    payload: Any
    priority: int | None
    tenant: str | None
    max_attempts: int | None
    next_tick: datetime | None
    last_tick: datetime | None
    last_job_id: int | None


@attrs.frozen
class TickResult:
    """One tick enqueued by a scheduler pass (:meth:`AsyncEngine.enqueue_due_ticks`).

    ``created`` is False when the tick's job existed already (another worker, or an
    earlier run, enqueued it): ``job_id`` is then that job's id.
    """

    schedule: str
    kind: str
    tick: datetime
    job_id: int
    created: bool
