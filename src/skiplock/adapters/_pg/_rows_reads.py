"""Rows and parameters of the reads role (``skiplock.ports.ReadsRole``): counts,
throughput, queue samples, the health snapshot and keyset pages. See ``_rows.py`` for the
shared rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import (
    FinishedCount,
    JobPage,
    JobState,
    Page,
    QueueStats,
    StateCount,
    WorkerStatus,
)
from skiplock.core.store import (
    PAIR_SCOPE,
    PROVIDER_SCOPE,
    BucketState,
    OrphanedJobs,
    QueueSample,
    ReplicaStatus,
)

from ._rows import (
    job_from_row,
    utc,
    utc_or_none,
)
from ._rows_controls import request_from_row
from ._rows_jobs import buckets_from_rows

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime, timedelta

#: The migration that adds the running totals behind the operator reads.
COUNTS_MIGRATION = 11


#: The migration that added the shared token buckets of cluster-wide rates.
RATES_MIGRATION = 15


#: A read that finds more unfolded count deltas than this folds them (migration 0011)
#: after answering, so reads stay cheap where no worker's counts loop runs.
ROLLUP_BACKLOG = 5000


def backlog_of(rows: Sequence[Mapping[str, Any]]) -> int:
    """The unfolded delta rows a ``counts``/``health_queues`` result reports (every row
    repeats it)."""
    return int(rows[0]["backlog"]) if rows else 0


def state_counts_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[StateCount]:
    """The ``counts`` result (a row of NULLs carries the backlog when there is no job)."""
    return [state_count_from_row(r) for r in rows if r["kind"] is not None]


def state_count_from_row(row: Mapping[str, Any]) -> StateCount:
    return StateCount(
        state=JobState(row["status"]),
        kind=row["kind"],
        tenant=row["tenant_id"],
        count=int(row["count"]),
        oldest_due_age=None if row["oldest_due_age"] is None else float(row["oldest_due_age"]),
    )


def bucket_params(since: datetime, bucket: timedelta) -> dict[str, Any]:
    """The arguments of the per-bucket reads (``finished_counts``, ``queue_samples``)."""
    return {"since": since, "bucket": bucket}


def finished_count_from_row(row: Mapping[str, Any]) -> FinishedCount:
    """One row of the ``finished_counts`` query."""
    return FinishedCount(
        start=utc(row["start"]),
        state=JobState(row["status"]),
        count=int(row["count"]),
        kind=row["kind"],
    )


def queue_sample_from_row(row: Mapping[str, Any]) -> QueueSample:
    """One row of the ``queue_samples`` query."""
    return QueueSample(
        minute=utc(row["minute"]),
        kind=row["kind"],
        pending=int(row["pending"]),
        due=int(row["due"]),
        running=int(row["running"]),
        due_bounded=bool(row["due_bounded"]),
        claims=int(row["claims"]),
        claim_p50=None if row["claim_p50"] is None else float(row["claim_p50"]),
        claim_p99=None if row["claim_p99"] is None else float(row["claim_p99"]),
    )


def running_of(rows: Sequence[Mapping[str, Any]]) -> int:
    """The running jobs the ``health_queues`` rows count (from the running totals)."""
    return sum(int(r["running"]) for r in rows if r["kind"] is not None)


def health_queues_params() -> dict[str, Any]:
    return {"bound": QueueStats.SPLIT_BOUND}


def queue_stats_from_row(row: Mapping[str, Any]) -> QueueStats:
    """One row of the ``health_queues`` query: the due/scheduled split from its bounded
    counts (``skiplock.core.QueueStats.split``)."""
    pending = int(row["pending"])
    scheduled_upto = row["scheduled_upto"]
    due_upto = row["due_upto"]
    due, scheduled, bounded = QueueStats.split(
        pending,
        0 if scheduled_upto is None else int(scheduled_upto),
        None if due_upto is None else int(due_upto),
    )
    return QueueStats(
        kind=row["kind"],
        tenant=row["tenant_id"],
        due=due,
        scheduled=scheduled,
        oldest_due_at=utc_or_none(row["oldest_due_at"]),
        running=int(row["running"]),
        dead=int(row["dead"]),
        bounded=bounded,
    )


def _frozen_or_none(values: Sequence[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def worker_status_from_row(row: Mapping[str, Any]) -> WorkerStatus:
    """One row of the ``health_workers`` query."""
    return WorkerStatus(
        id=row["id"],
        host=row["host"],
        pid=int(row["pid"]),
        kinds=_frozen_or_none(row["kinds"]),
        tenants=_frozen_or_none(row["tenants"]),
        started_at=utc(row["started_at"]),
        heartbeat_at=utc(row["heartbeat_at"]),
        running=int(row["running"]),
        oldest_claimed_at=utc_or_none(row["oldest_claimed_at"]),
        slots=row.get("slots"),
        version=row.get("version"),
        request=None if row.get("request") is None else request_from_row(row),
    )


def orphaned_jobs_from_row(row: Mapping[str, Any]) -> OrphanedJobs:
    """One row of the ``health_orphans`` query."""
    return OrphanedJobs(
        worker_id=row["worker_id"],
        running=int(row["running"]),
        oldest_claimed_at=utc(row["oldest_claimed_at"]),
    )


def replica_status_from_row(row: Mapping[str, Any]) -> ReplicaStatus | None:
    """The ``replica`` query's row: None on a primary."""
    if not row["standby"]:
        return None
    return ReplicaStatus(lag=row["lag"], replayed_at=utc_or_none(row["replayed_at"]))


def as_of(now: datetime, replica: ReplicaStatus | None) -> datetime:
    """The time a snapshot read at ``now`` shows the data as of: ``now`` on a primary, its
    lag earlier on a standby (heartbeats and due times are aged from then)."""
    lag = None if replica is None else replica.lag
    return now if lag is None else now - lag


def bucket_states(rows: Sequence[Mapping[str, Any]]) -> tuple[BucketState, ...]:
    """The ``rate_buckets`` query's rows for the health snapshot."""
    _, pairs, providers = buckets_from_rows(rows)
    states = [BucketState(PAIR_SCOPE, k, t, b) for (k, t), b in pairs.items()]
    states += [BucketState(PROVIDER_SCOPE, name, None, b) for name, b in providers.items()]
    return tuple(states)


#: The largest budget a page's walk is given (a bigint, whatever the limit).
_MAX_BUDGET = 2**62


def page_params(page: Page) -> dict[str, Any]:
    """Parameters of a keyset page (``list_jobs``): the cursor, the limit, the order and
    the walk's budget of rows read (``JobPage.READ_FACTOR`` per job asked for)."""
    return {
        "after_id": page.after_id,
        "limit": page.limit,
        "descending": page.descending,
        "budget": min(page.limit * JobPage.READ_FACTOR, _MAX_BUDGET),
    }


def job_page_from_rows(rows: Sequence[Mapping[str, Any]]) -> JobPage:
    """A page from the rows of ``list_jobs``: its jobs, then possibly one row without a
    job that says where a bounded walk stopped (``resume_after``)."""
    resume = [r["resume_after"] for r in rows if r["id"] is None]
    return JobPage(
        (job_from_row(r) for r in rows if r["id"] is not None),
        resume_after=resume[0] if resume else None,
    )
