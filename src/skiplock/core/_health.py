"""Health and info (R9): what a store reads for it, the report, and the rules between them.

A store reads a :class:`HealthSnapshot` (its now, the registered workers, per kind and
tenant the jobs that matter, the schema version); :func:`assess_health` turns it into a
:class:`HealthReport` with one line per problem. Pure: time comes with the snapshot.
The snapshot's types are in :mod:`._health_snapshot`, the report's in
:mod:`._health_report`; this module re-exports both, beside the rules.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ._bucket import RateTable
from ._errors import DatabaseUnavailableError
from ._health_report import (
    AbandonedJobs,
    HealthReport,
    HealthThresholds,
    KindHealth,
    WorkerHealth,
    format_duration,
)
from ._health_snapshot import (
    PAIR_SCOPE,
    PENDING_SPLIT_BOUND,
    PROVIDER_SCOPE,
    BucketState,
    HealthSnapshot,
    OrphanedJobs,
    QueueStats,
    ReplicaStatus,
    SchemaInfo,
    ThrottledPair,
    WorkerStatus,
    pending_split,
)
from ._rates import bucket_maps, rate_holds

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._controls import Pause

__all__ = [
    "LIVE_HEARTBEATS",
    "PAIR_SCOPE",
    "PENDING_SPLIT_BOUND",
    "PROVIDER_SCOPE",
    "AbandonedJobs",
    "BucketState",
    "HealthReport",
    "HealthSnapshot",
    "HealthThresholds",
    "KindHealth",
    "OrphanedJobs",
    "QueueStats",
    "ReplicaStatus",
    "SchemaInfo",
    "ThrottledPair",
    "WorkerHealth",
    "WorkerStatus",
    "abandoned_jobs",
    "assess_health",
    "format_duration",
    "pending_split",
    "throttled_pairs",
    "unreachable_report",
]

#: A worker is live while its last heartbeat is younger than this many heartbeat
#: intervals (capped at the stale TTL), unless the caller gives a timeout.
LIVE_HEARTBEATS = 3
#: Problem lines name at most this many tenants or workers, then "and N more".
_MAX_NAMED = 3


# ---- the rules -------------------------------------------------------------------------


def _listed(items: list[str]) -> str:
    named = ", ".join(items[:_MAX_NAMED])
    more = len(items) - _MAX_NAMED
    return f"{named} and {more} more" if more > 0 else named


def _schema_problem(schema: SchemaInfo) -> str | None:
    todo = f"; run `{schema.apply_command}`" if schema.apply_command else ""
    if not schema.installed:
        return f"schema {schema.name!r} is not installed{todo}"
    if schema.pending:
        return (
            f"schema {schema.name!r} is at version {schema.version}, this code expects "
            f"{schema.expected} (pending: {', '.join(schema.pending)}){todo}"
        )
    return None


def _claims_kind(worker: WorkerHealth, kind: str) -> bool:
    return worker.kinds is None or kind in worker.kinds


def _uncovered_problem(
    kind: str, uncovered: dict[str | None, int], workers: list[WorkerHealth]
) -> str:
    count = sum(uncovered.values())
    if any(w.live and _claims_kind(w, kind) for w in workers):
        # The kind is claimed, but not for these tenants.
        tenants = sorted("(no tenant)" if t is None else repr(t) for t in uncovered)
        return (
            f"kind {kind!r}: {count} due job(s) of tenant(s) {_listed(tenants)} "
            "that no live worker claims"
        )
    line = f"kind {kind!r}: {count} due job(s) and no live worker claims the kind"
    silent = sorted(
        (w for w in workers if not w.live and _claims_kind(w, kind)),
        key=lambda w: w.heartbeat_age,
    )
    if silent:
        names = [f"{w.id} (silent for {format_duration(w.heartbeat_age)})" for w in silent]
        line += f"; worker(s) that claim it stopped sending heartbeats: {_listed(names)}"
    return line


def abandoned_jobs(
    snapshot: HealthSnapshot, workers: Sequence[WorkerHealth]
) -> list[AbandonedJobs]:
    """Running jobs of ``snapshot`` whose worker is gone: those of the silent ``workers``
    (the report's, with ``live`` decided) and those under ids without a row; by id."""
    now = snapshot.now

    def age(claimed_at: datetime | None) -> timedelta | None:
        return None if claimed_at is None else max(now - claimed_at, timedelta(0))

    oldest = {w.id: w.oldest_claimed_at for w in snapshot.workers}
    found = [
        AbandonedJobs(
            worker_id=w.id,
            registered=True,
            running=w.running,
            oldest_claimed_at=oldest.get(w.id),
            age=age(oldest.get(w.id)),
            heartbeat_age=w.heartbeat_age,
        )
        for w in workers
        if not w.live and w.running
    ]
    found += [
        AbandonedJobs(
            worker_id=o.worker_id,
            registered=False,
            running=o.running,
            oldest_claimed_at=o.oldest_claimed_at,
            age=age(o.oldest_claimed_at),
            heartbeat_age=None,
        )
        for o in snapshot.orphaned
        if o.running
    ]
    return sorted(found, key=lambda group: group.worker_id)


def _abandoned_problem(groups: list[AbandonedJobs], any_live: bool) -> str:
    count = sum(group.running for group in groups)
    line = (
        f"{count} running job(s) whose worker is gone: "
        f"{_listed([group.describe() for group in groups])}; nothing finishes them, "
        "stale-claim recovery returns them to pending"
    )
    if not any_live:
        return line + " once a worker runs (none is live)"
    return line + " at a live worker's next maintenance pass"


def throttled_pairs(
    snapshot: HealthSnapshot,
    rates: RateTable | None = None,
    cluster_limits: Mapping[str, int] | None = None,
    paused: Sequence[Pause] = (),
) -> list[ThrottledPair]:
    """The (kind, tenant) pairs of ``snapshot`` with due jobs that a limit holds back at
    its now: a pause of ``paused`` (``limit`` "paused"), an empty bucket of the pair or
    of its kind's provider as a claim decides it with the rates in force ``rates``
    (:func:`~._rates.rate_holds`, as ``why()`` does: a pair bucket of a rate ``rates``
    does not know keeps its own), a kind of ``cluster_limits`` that runs as many as
    allowed. Costs what the snapshot holds."""
    clock = snapshot.now.timestamp()
    buckets = bucket_maps(snapshot.buckets)
    table = RateTable() if rates is None else rates
    limits = cluster_limits or {}
    running: dict[str, int] = defaultdict(int)
    for stats in snapshot.queues:
        running[stats.kind] += stats.running
    found: list[ThrottledPair] = []
    for stats in snapshot.queues:
        kind, tenant = stats.kind, stats.tenant
        if not stats.due:
            continue
        bucket, provider = rate_holds(table, (kind, tenant), clock, buckets)
        if any(pause.covers(kind, tenant) for pause in paused):
            limit = "paused"
        elif bucket is not None:
            limit = "rate_limit"
        elif provider is not None:
            limit = "provider"
        elif kind in limits and running[kind] >= limits[kind]:
            limit = "cluster_limit"
        else:
            continue
        found.append(ThrottledPair(kind, tenant, stats.due, limit, stats.bounded))
    return found


def assess_health(
    snapshot: HealthSnapshot,
    thresholds: HealthThresholds,
    paused: Sequence[Pause] = (),
    *,
    rates: RateTable | None = None,
    cluster_limits: Mapping[str, int] | None = None,
) -> HealthReport:
    """The report on ``snapshot`` and the pauses in force. Problems: a schema missing or
    older than the code, due pending jobs no live worker claims (unless paused), running
    jobs whose worker is gone (:func:`abandoned_jobs`), and those ``thresholds`` define.
    Throttled pairs (not a problem) are found with ``paused``, ``rates`` and
    ``cluster_limits`` as :func:`throttled_pairs` says."""
    now = snapshot.now
    worker_timeout = thresholds.worker_timeout
    max_pending_age = thresholds.max_pending_age
    max_dead = thresholds.max_dead
    statuses = {w.id: w for w in snapshot.workers}
    workers = [
        WorkerHealth(
            id=w.id,
            host=w.host,
            pid=w.pid,
            kinds=w.kinds,
            tenants=w.tenants,
            started_at=w.started_at,
            last_heartbeat=w.heartbeat_at,
            heartbeat_age=max(now - w.heartbeat_at, timedelta(0)),
            running=w.running,
            live=w.heartbeat_at >= now - worker_timeout,
            slots=w.slots,
            version=w.version,
            request=w.request,
        )
        for w in sorted(snapshot.workers, key=lambda w: w.id)
    ]
    live = [statuses[w.id] for w in workers if w.live]

    by_kind: dict[str, list[QueueStats]] = defaultdict(list)
    for stats in snapshot.queues:
        by_kind[stats.kind].append(stats)
    problems: list[str] = []
    if snapshot.schema is not None and (problem := _schema_problem(snapshot.schema)):
        problems.append(problem)
    kinds: list[KindHealth] = []
    uncovered_kinds: list[str] = []
    for kind in sorted(by_kind):
        rows = by_kind[kind]
        uncovered = {
            s.tenant: s.due
            for s in rows
            if s.due
            and not any(w.claims(kind, s.tenant) for w in live)
            and not any(p.covers(kind, s.tenant) for p in paused)
        }
        due_times = [s.oldest_due_at for s in rows if s.oldest_due_at is not None]
        health = KindHealth(
            kind=kind,
            pending_due=sum(s.due for s in rows),
            scheduled=sum(s.scheduled for s in rows),
            oldest_due_age=max(now - min(due_times), timedelta(0)) if due_times else None,
            running=sum(s.running for s in rows),
            dead=sum(s.dead for s in rows),
            uncovered=sum(uncovered.values()),
            bounded=any(s.bounded for s in rows),
        )
        kinds.append(health)
        if uncovered:
            uncovered_kinds.append(kind)
            problems.append(_uncovered_problem(kind, uncovered, workers))
        age = health.oldest_due_age
        if max_pending_age is not None and age is not None and age > max_pending_age:
            problems.append(
                f"kind {kind!r}: the oldest due job has waited {format_duration(age)} "
                f"(max {format_duration(max_pending_age)})"
            )
        if max_dead is not None and health.dead > max_dead:
            problems.append(f"kind {kind!r}: {health.dead} dead job(s) (max {max_dead})")
    abandoned = abandoned_jobs(snapshot, workers)
    if abandoned:
        problems.append(_abandoned_problem(abandoned, bool(live)))
    return HealthReport(
        healthy=not problems,
        problems=problems,
        reachable=True,
        error=None,
        checked_at=now,
        schema=snapshot.schema,
        workers=workers,
        kinds=kinds,
        uncovered_kinds=uncovered_kinds,
        thresholds=thresholds,
        paused=list(paused),
        throttled=throttled_pairs(snapshot, rates, cluster_limits, paused),
        abandoned=abandoned,
        replica=snapshot.replica,
    )


def unreachable_report(error: str, thresholds: HealthThresholds) -> HealthReport:
    """The report when the store could not be read: unhealthy, ``error`` as the reason."""
    line = " ".join(error.split()).removeprefix(DatabaseUnavailableError.UNREACHABLE)
    line = line or "unknown error"
    return HealthReport(
        healthy=False,
        problems=[f"database unreachable: {line}"],
        reachable=False,
        error=line,
        checked_at=None,
        schema=None,
        workers=[],
        kinds=[],
        uncovered_kinds=[],
        thresholds=thresholds,
    )
