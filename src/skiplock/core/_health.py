"""Health and info (R9): what a store reads for it, the report, and the rules between them.

A store reads a :class:`HealthSnapshot` (its now, the registered workers, per kind and
tenant the jobs that matter, the schema version); :func:`assess_health` turns it into a
:class:`HealthReport` with one line per problem. Pure: time comes with the snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ._bucket import RateTable, TokenBucket, refill
from ._controls import Pause
from ._errors import DatabaseUnavailableError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: A worker is live while its last heartbeat is younger than this many heartbeat
#: intervals (capped at the stale TTL), unless the caller gives a timeout.
LIVE_HEARTBEATS = 3
#: Problem lines name at most this many tenants or workers, then "and N more".
_MAX_NAMED = 3
#: A store counts the pending jobs of a (kind, tenant) that are scheduled (due later),
#: and if there are more than this many the due ones, one by one up to this many + 1:
#: the due/scheduled split is exact unless both sides have more (then both are shown as
#: "at least" this many, :attr:`QueueStats.bounded`). The pending total is always exact.
PENDING_SPLIT_BOUND = 10_000


def pending_split(
    pending: int, scheduled_upto: int, due_upto: int | None, bound: int = PENDING_SPLIT_BOUND
) -> tuple[int, int, bool]:
    """(due, scheduled, bounded) of ``pending`` jobs from a bounded count: the scheduled
    ones counted up to ``bound + 1`` and, when that many, the due ones counted up to
    ``bound + 1`` (else None). Exact unless both reached ``bound + 1``: then each is given
    as ``bound``, a lower bound, and ``bounded`` is True."""
    if scheduled_upto <= bound:
        return pending - scheduled_upto, scheduled_upto, False
    if due_upto is not None and due_upto <= bound:
        return due_upto, pending - due_upto, False
    return bound, bound, True


# ---- what a store reads ----------------------------------------------------------------


@attrs.frozen
class _RegisteredWorker:
    """What every view of a registered worker starts with: who it is and what it claims
    (the fields :class:`WorkerStatus` and :class:`WorkerHealth` share, in this order)."""

    id: str
    host: str
    pid: int
    #: The kinds it claims; None: every kind.
    kinds: frozenset[str] | None
    #: The tenants whose jobs it claims; None: any tenant (and jobs without one).
    tenants: frozenset[str] | None
    started_at: datetime


@attrs.frozen
class WorkerStatus(_RegisteredWorker):
    """A registered worker as the store sees it."""

    heartbeat_at: datetime
    #: Jobs running under its id.
    running: int = 0
    #: When the longest-running of them was claimed (None: none runs).
    oldest_claimed_at: datetime | None = None

    def claims(self, kind: str, tenant: str | None) -> bool:
        """Whether this worker would claim a job of ``kind`` and ``tenant``."""
        return (self.kinds is None or kind in self.kinds) and (
            self.tenants is None or (tenant is not None and tenant in self.tenants)
        )


@attrs.frozen
class OrphanedJobs:
    """Jobs running under a worker id that has no worker row (its worker unregistered
    or was removed with them still running): nothing will finish them."""

    worker_id: str
    running: int
    oldest_claimed_at: datetime


@attrs.frozen
class QueueStats:
    """Jobs of one kind and tenant: pending (due now, or scheduled later), running, dead."""

    #: How far the due/scheduled split is counted (see ``bounded``).
    SPLIT_BOUND: ClassVar[int] = PENDING_SPLIT_BOUND
    #: (due, scheduled, bounded) from a bounded count (:func:`pending_split`): what a
    #: store reports for a (kind, tenant) group.
    split = staticmethod(pending_split)

    kind: str
    tenant: str | None
    due: int = 0
    scheduled: int = 0
    #: The earliest due time of the due pending jobs (None: none is due).
    oldest_due_at: datetime | None = None
    running: int = 0
    dead: int = 0
    #: True when ``due`` and ``scheduled`` are lower bounds: both exceed
    #: ``QueueStats.SPLIT_BOUND`` and the split was not counted further.
    bounded: bool = False


@attrs.frozen
class SchemaInfo:
    """The version of a store's schema: ``version`` is the highest migration applied
    (0: none), ``expected`` the one this code needs."""

    name: str
    installed: bool
    version: int
    expected: int
    #: Migrations this code has that the database lacks.
    pending: tuple[str, ...] = ()
    #: What installs or updates it, e.g. ``skiplock schema apply --dsn ...``.
    apply_command: str | None = None

    @property
    def up_to_date(self) -> bool:
        """Installed with no migration pending (a newer database is up to date too)."""
        return self.installed and not self.pending

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``name``, ``installed``, ``version``, ``expected``, ``pending``,
        ``up_to_date``."""
        return {
            "name": self.name,
            "installed": self.installed,
            "version": self.version,
            "expected": self.expected,
            "pending": list(self.pending),
            "up_to_date": self.up_to_date,
        }


#: The scopes of a :class:`BucketState`: a (kind, tenant) pair's bucket, a provider's.
PAIR_SCOPE, PROVIDER_SCOPE = "pair", "provider"


@attrs.frozen
class BucketState:
    """A shared token bucket of cluster-wide rates that is not full (a full one, or none,
    holds nothing back): ``scope`` ``"pair"`` (``name`` a kind, with ``tenant``) or
    ``"provider"`` (``name`` a provider). Times in seconds on the store's clock."""

    scope: str
    name: str
    tenant: str | None
    bucket: TokenBucket


@attrs.frozen
class HealthSnapshot:
    """What a store reads for the health report, in one operation (R9)."""

    #: The store's clock when it read the rest.
    now: datetime
    workers: tuple[WorkerStatus, ...] = ()
    queues: tuple[QueueStats, ...] = ()
    #: None: the store has no versioned schema (the in-memory one).
    schema: SchemaInfo | None = None
    #: The shared token buckets that are not full (drawn from lately): bounded by the
    #: pairs and providers in use, never the jobs.
    buckets: tuple[BucketState, ...] = ()
    #: Running jobs whose worker id has no row, per id.
    orphaned: tuple[OrphanedJobs, ...] = ()
    #: None: the store read a primary (or cannot tell); else the hot standby it read,
    #: with its replay lag. ``now`` is then the time the data is as of (the standby's
    #: clock minus its lag), so heartbeats and due times are not aged by the lag.
    replica: ReplicaStatus | None = None


@attrs.frozen
class ReplicaStatus:
    """A hot standby a store reads (issue 43): how far its data is behind the primary.

    ``lag`` is zero while the standby has replayed every change it received, else the
    time since the last change it replayed was committed on the primary (it grows while
    replay is paused or cannot keep up); None until it has replayed any change.
    ``replayed_at``: that commit's time on the primary (None: none yet)."""

    lag: timedelta | None
    replayed_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``lag_seconds`` (null: unknown), ``replayed_at`` (ISO 8601)."""
        return {"lag_seconds": _seconds(self.lag), "replayed_at": _iso(self.replayed_at)}


@attrs.frozen
class ThrottledPair:
    """Due jobs of one (kind, tenant) that a limit holds back now: ``limit`` is
    ``paused`` (a pause stops them, issue 30), ``rate_limit`` (its token bucket is
    empty), ``provider`` (its provider's is) or ``cluster_limit`` (the kind runs as many
    as allowed). ``due`` is a lower bound when
    ``bounded`` (:attr:`QueueStats.bounded`)."""

    kind: str
    tenant: str | None
    due: int
    limit: str
    bounded: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``kind``, ``tenant``, ``due``, ``limit``, ``bounded``."""
        return {
            "kind": self.kind,
            "tenant": self.tenant,
            "due": self.due,
            "limit": self.limit,
            "bounded": self.bounded,
        }


# ---- the report ------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _names(values: frozenset[str] | None) -> list[str] | None:
    return None if values is None else sorted(values)


@attrs.frozen
class WorkerHealth(_RegisteredWorker):
    """A registered worker in the report: live while its heartbeat is recent enough."""

    last_heartbeat: datetime
    heartbeat_age: timedelta
    running: int
    live: bool

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


# ---- the rules -------------------------------------------------------------------------


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
    its now: a pause of ``paused`` (``limit`` "paused"), an empty pair bucket (whatever
    the configuration: the bucket keeps its rate), an empty provider bucket of a kind
    ``rates`` gives a provider, a kind of ``cluster_limits`` that runs as many as
    allowed. Costs what the snapshot holds."""
    clock = snapshot.now.timestamp()

    def empty(state: BucketState) -> bool:
        return refill(state.bucket, clock).tokens < 1

    pairs = {(b.name, b.tenant) for b in snapshot.buckets if b.scope == PAIR_SCOPE and empty(b)}
    providers = {b.name for b in snapshot.buckets if b.scope == PROVIDER_SCOPE and empty(b)}
    kind_providers = {} if rates is None else rates.providers
    limits = cluster_limits or {}
    running: dict[str, int] = defaultdict(int)
    for stats in snapshot.queues:
        running[stats.kind] += stats.running
    found: list[ThrottledPair] = []
    for stats in snapshot.queues:
        kind, tenant = stats.kind, stats.tenant
        if not stats.due:
            continue
        provider = kind_providers.get(kind)
        if any(pause.covers(kind, tenant) for pause in paused):
            limit = "paused"
        elif (kind, tenant) in pairs:
            limit = "rate_limit"
        elif provider is not None and provider[0] in providers:
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
