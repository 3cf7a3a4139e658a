"""Health and info (R9): what a store reads for the health report.

A store reads a :class:`HealthSnapshot` (its now, the registered workers, per kind and
tenant the jobs that matter, the schema version, the rate buckets);
:func:`~._health.assess_health` turns it into a report (:mod:`._health_report`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

import attrs

from ._bucket import TokenBucket
from ._worker_requests import WorkerRequest

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


@attrs.frozen
class RegisteredWorker:
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
class WorkerStatus(RegisteredWorker):
    """A registered worker as the store sees it."""

    heartbeat_at: datetime
    #: Jobs running under its id.
    running: int = 0
    #: When the longest-running of them was claimed (None: none runs).
    oldest_claimed_at: datetime | None = None
    #: Its slots and skiplock version as it registered them (None: a worker of a release
    #: before issue 45), and what an operator asked it to do (drain or stop), if anything.
    slots: int | None = None
    version: str | None = None
    request: WorkerRequest | None = None

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
        lag = None if self.lag is None else self.lag.total_seconds()
        replayed = None if self.replayed_at is None else self.replayed_at.isoformat()
        return {"lag_seconds": lag, "replayed_at": replayed}


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
