"""Health and info (R9): the report :func:`~._health.assess_health` makes of a store's
:class:`~._health_snapshot.HealthSnapshot`, one line per problem, JSON-ready.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs

from ._controls import Pause
from ._health_snapshot import RegisteredWorker, ReplicaStatus, SchemaInfo, ThrottledPair
from ._worker_requests import WorkerRequest


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _names(values: frozenset[str] | None) -> list[str] | None:
    return None if values is None else sorted(values)


def format_duration(value: timedelta) -> str:
    """A short human duration: ``250ms``, ``45s``, ``12m30s``, ``2h5m``, ``3d4h``."""
    seconds = value.total_seconds()
    if seconds < 0:
        return "-" + format_duration(-value)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts[:2])


@attrs.frozen
class WorkerHealth(RegisteredWorker):
    """A registered worker in the report: live while its heartbeat is recent enough."""

    last_heartbeat: datetime
    heartbeat_age: timedelta
    running: int
    live: bool
    slots: int | None = None
    version: str | None = None
    #: What an operator asked it to do (drain or stop), if anything (issue 45).
    request: WorkerRequest | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times ISO 8601, ages in seconds, kinds/tenants sorted or null)."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "kinds": _names(self.kinds),
            "tenants": _names(self.tenants),
            "started_at": _iso(self.started_at),
            "last_heartbeat": _iso(self.last_heartbeat),
            "heartbeat_age_seconds": _seconds(self.heartbeat_age),
            "running": self.running,
            "live": self.live,
            "slots": self.slots,
            "version": self.version,
            "request": None if self.request is None else self.request.to_json(),
        }


@attrs.frozen
class AbandonedJobs:
    """Running jobs whose worker is gone, in the report: it unregistered (or its row was
    removed) with them still running (``registered`` False), or it stopped sending
    heartbeats (``heartbeat_age`` beyond ``worker_timeout``). Nothing finishes them: they
    stay ``running`` until stale-claim recovery returns them to pending."""

    worker_id: str
    registered: bool
    running: int
    #: When the longest-running of them was claimed, and how long ago.
    oldest_claimed_at: datetime | None
    age: timedelta | None
    #: How long the worker has been silent (None: no row).
    heartbeat_age: timedelta | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times ISO 8601, ages in seconds)."""
        return {
            "worker_id": self.worker_id,
            "registered": self.registered,
            "running": self.running,
            "oldest_claimed_at": _iso(self.oldest_claimed_at),
            "age_seconds": _seconds(self.age),
            "heartbeat_age_seconds": _seconds(self.heartbeat_age),
        }

    def describe(self) -> str:
        """``id (unregistered: 2 job(s), the oldest running 6m12s)``."""
        state = (
            "unregistered"
            if self.heartbeat_age is None
            else f"silent for {format_duration(self.heartbeat_age)}"
        )
        oldest = "" if self.age is None else f", the oldest running {format_duration(self.age)}"
        return f"{self.worker_id} ({state}: {self.running} job(s){oldest})"


@attrs.frozen
class KindHealth:
    """One kind in the report (every tenant together)."""

    kind: str
    #: Pending jobs due now (the queue depth) and pending jobs due later.
    pending_due: int
    scheduled: int
    #: How long the oldest due pending job has been due (None: none is due).
    oldest_due_age: timedelta | None
    running: int
    dead: int
    #: Due pending jobs that no live worker claims (its kind and tenant).
    uncovered: int
    #: True when ``pending_due``, ``scheduled`` (and ``uncovered``) are lower bounds ("at
    #: least"): a tenant of the kind has more than ``QueueStats.SPLIT_BOUND`` jobs on
    #: both sides of now (:attr:`QueueStats.bounded`).
    bounded: bool = False

    @property
    def covered(self) -> bool:
        """Whether a live worker claims every due pending job of the kind."""
        return self.uncovered == 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the age in seconds)."""
        return {
            "kind": self.kind,
            "pending_due": self.pending_due,
            "scheduled": self.scheduled,
            "oldest_due_age_seconds": _seconds(self.oldest_due_age),
            "running": self.running,
            "dead": self.dead,
            "uncovered": self.uncovered,
            "covered": self.covered,
            "bounded": self.bounded,
        }


@attrs.frozen
class HealthThresholds:
    """What the report counts as a problem: a worker is live while its last heartbeat is
    at most ``worker_timeout`` old; a kind whose oldest due job has waited longer than
    ``max_pending_age``, or with more than ``max_dead`` dead jobs, is a problem (None:
    never)."""

    worker_timeout: timedelta
    max_pending_age: timedelta | None = None
    max_dead: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (durations in seconds)."""
        return {
            "worker_timeout_seconds": _seconds(self.worker_timeout),
            "max_pending_age_seconds": _seconds(self.max_pending_age),
            "max_dead": self.max_dead,
        }


@attrs.frozen
class HealthReport:
    """The health of a store's queue and workers (R9), from ``engine.health()``.

    ``healthy`` is True when ``problems`` is empty; each problem is one line saying what
    is wrong and, where it can, what to do. ``to_dict()`` is JSON-serialisable.
    """

    healthy: bool
    problems: list[str]
    #: False when the store could not be read (``error`` says why); the rest is empty.
    reachable: bool
    error: str | None
    #: The store's clock when it was read (None if it could not be).
    checked_at: datetime | None
    #: None: unknown (unreachable) or the store has no versioned schema.
    schema: SchemaInfo | None
    workers: list[WorkerHealth]
    kinds: list[KindHealth]
    #: Kinds with due pending jobs that no live worker claims.
    uncovered_kinds: list[str]
    #: The thresholds the report was made with.
    thresholds: HealthThresholds
    #: The pauses in force (issue 30): kinds, tenants and pairs whose jobs are not
    #: claimed. Not a problem: an operator chose them.
    paused: list[Pause] = attrs.field(factory=list)
    #: Due jobs held back by a limit or a pause, per (kind, tenant)
    #: (:func:`throttled_pairs`).
    throttled: list[ThrottledPair] = attrs.field(factory=list)
    #: Running jobs whose worker is gone (unregistered or silent), per worker id: a
    #: problem, with their age.
    abandoned: list[AbandonedJobs] = attrs.field(factory=list)
    #: The hot standby the report was read from, with its lag (None: the primary).
    replica: ReplicaStatus | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data; keys are listed in docs/health.md."""
        return {
            "healthy": self.healthy,
            "problems": list(self.problems),
            "checked_at": _iso(self.checked_at),
            "database": {"reachable": self.reachable, "error": self.error},
            "schema": None if self.schema is None else self.schema.to_dict(),
            "workers": [worker.to_dict() for worker in self.workers],
            "kinds": [kind.to_dict() for kind in self.kinds],
            "uncovered_kinds": list(self.uncovered_kinds),
            "throttled": [pair.to_dict() for pair in self.throttled],
            "abandoned": [group.to_dict() for group in self.abandoned],
            "thresholds": self.thresholds.to_dict(),
            "paused": [pause.to_json() for pause in self.paused],
            "replica": None if self.replica is None else self.replica.to_dict(),
        }
