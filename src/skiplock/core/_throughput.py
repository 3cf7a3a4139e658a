"""Throughput over time: how many jobs finished per time bucket (the dashboard's chart).

A store counts the jobs that finished since a time, per final state and bucket
(:class:`FinishedCount`, from each job's ``completed_at``); :func:`throughput_window`
chooses the buckets and :func:`throughput_from` turns the counts into a
:class:`Throughput` with every bucket present. Pure: time comes as an argument.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from ._errors import ValidationError
from ._types import JobState

#: The states a job finishes in (its ``completed_at`` is set): what throughput counts.
FINISHED_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED}
)
#: At most this many buckets in one :class:`Throughput` (a day of minutes).
MAX_BUCKETS = 1440

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@attrs.frozen
class FinishedCount:
    """How many jobs of ``kind`` finished in ``state`` within the bucket that begins at
    ``start`` (their ``completed_at``), as a store counts them. ``kind`` None: a store
    that does not tell the kinds apart (throughput sums the rows either way)."""

    start: datetime
    state: JobState
    count: int
    kind: str | None = None


@attrs.frozen
class ThroughputBucket:
    """The jobs that finished in ``[start, end)``, by final state."""

    start: datetime
    end: datetime
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0

    @property
    def failures(self) -> int:
        """Jobs that ended without success and will not run again unless replayed:
        dead (attempts exhausted, or a permanent error) and marked failed."""
        return self.dead + self.failed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times in ISO 8601)."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "succeeded": self.succeeded,
            "failed": self.failed,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "failures": self.failures,
        }


@attrs.frozen
class Throughput:
    """Jobs finished per bucket over a window ending at ``now`` (``engine.throughput()``):
    ``buckets`` oldest first, each ``bucket`` long, aligned on multiples of it since the
    Unix epoch (UTC); the last one holds ``now`` and is still filling."""

    now: datetime
    bucket: timedelta
    buckets: tuple[ThroughputBucket, ...]

    @property
    def succeeded(self) -> int:
        """Jobs that succeeded in the window."""
        return sum(b.succeeded for b in self.buckets)

    @property
    def failures(self) -> int:
        """Jobs that died or were marked failed in the window."""
        return sum(b.failures for b in self.buckets)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times in ISO 8601, the bucket in seconds)."""
        return {
            "now": self.now.isoformat(),
            "bucket_seconds": self.bucket.total_seconds(),
            "succeeded": self.succeeded,
            "failures": self.failures,
            "buckets": [b.to_dict() for b in self.buckets],
        }


def bucket_start(at: datetime, origin: datetime, bucket: timedelta) -> datetime:
    """The start of the ``bucket``-long bucket that holds ``at``, counting buckets from
    ``origin``."""
    return origin + ((at - origin) // bucket) * bucket


def throughput_window(now: datetime, window: timedelta, bucket: timedelta) -> tuple[datetime, int]:
    """The start of the first bucket and the number of buckets covering ``window`` up to
    ``now``: buckets are aligned on multiples of ``bucket`` since the Unix epoch and the
    last one holds ``now``. ValidationError for a bucket that is not a whole number of
    seconds (at least one), a window shorter than a bucket, or more than
    :data:`MAX_BUCKETS` buckets."""
    if bucket < timedelta(seconds=1) or bucket % timedelta(seconds=1):
        raise ValidationError(f"bucket must be a whole number of seconds >= 1, got {bucket}")
    if window < bucket:
        raise ValidationError(f"window must be at least one bucket ({bucket}), got {window}")
    count = -(-window // bucket)  # whole buckets, rounded up
    if count > MAX_BUCKETS:
        raise ValidationError(
            f"window / bucket must be at most {MAX_BUCKETS} buckets, got {count} "
            f"({window} / {bucket})"
        )
    last = bucket_start(now, _EPOCH, bucket)
    return last - (count - 1) * bucket, count


def throughput_from(
    now: datetime,
    since: datetime,
    bucket: timedelta,
    count: int,
    finished: list[FinishedCount],
) -> Throughput:
    """The :class:`Throughput` of ``count`` buckets from ``since``, every bucket present
    (zeros where no job finished), from a store's counts; counts outside the window are
    ignored."""
    totals: dict[int, dict[JobState, int]] = {}
    for row in finished:
        index, rest = divmod(row.start - since, bucket)
        if rest or not 0 <= index < count:
            continue
        by_state = totals.setdefault(index, {})
        by_state[row.state] = by_state.get(row.state, 0) + row.count
    buckets = []
    for index in range(count):
        start = since + index * bucket
        by_state = totals.get(index, {})
        buckets.append(
            ThroughputBucket(
                start=start,
                end=start + bucket,
                succeeded=by_state.get(JobState.SUCCEEDED, 0),
                failed=by_state.get(JobState.FAILED, 0),
                dead=by_state.get(JobState.DEAD, 0),
                cancelled=by_state.get(JobState.CANCELLED, 0),
            )
        )
    return Throughput(now=now, bucket=bucket, buckets=tuple(buckets))
