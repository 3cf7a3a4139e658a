"""The queue over time: what the dashboard's charts draw (``engine.history()``).

Two reads of a store feed it, neither in proportion to the jobs table:

- the jobs finished per bucket, kind and final state (``JobStore.finished_counts``, from
  per-minute totals): throughput per kind and the failure rate;
- one :class:`QueueSample` per minute and kind, taken by the store's counts roll-up
  (which workers run every second): the backlog then, and the claim latency of a bounded
  sample of the jobs that succeeded in the minute before; read folded per bucket
  (``JobStore.queue_samples``, at most buckets x kinds rows).

:func:`take_samples` is the sampling rule and :func:`fold_samples` the folding rule (the
memory store runs them; the PostgreSQL store's ``sample_queues`` and ``queue_samples``
query do the same in SQL); :func:`history_from` puts both reads into buckets. Pure: time
comes as an argument.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from ._health import PENDING_SPLIT_BOUND, pending_split
from ._throughput import bucket_start, throughput_window
from ._types import Job, JobState

if TYPE_CHECKING:
    from ._throughput import FinishedCount

#: Samples are kept this long (the longest chart is a day), then the roll-up removes them.
SAMPLE_RETENTION = timedelta(days=2)
#: A minute's claim latency is read from at most this many of the jobs that succeeded in
#: the minute before the sample (the latest ones): a bounded read at any rate.
PICKUP_SAMPLE = 200
#: The kind of the sample that sums every kind (no job kind is empty). Every sampled
#: minute has one, so a minute without it was not sampled (no roll-up ran).
ALL_KINDS = ""

_MINUTE = timedelta(minutes=1)


def sample_minute(now: datetime) -> datetime:
    """The start of the minute (UTC) that holds ``now``: the key of its samples."""
    return throughput_window(now, _MINUTE, _MINUTE)[0]


@attrs.frozen
class QueueSample:
    """One kind's queue as the roll-up saw it during ``minute`` (``kind`` is
    :data:`ALL_KINDS` for the sum of every kind).

    ``pending`` counts every pending job, ``due`` those already due (exact unless
    ``due_bounded``: then a lower bound, see ``skiplock.core.QueueStats.bounded``),
    ``running`` the running ones. ``claim_p50``/``claim_p99`` (seconds) are the median and
    99th percentile of ``claimed_at - available_at`` over ``claims`` jobs: the latest
    :data:`PICKUP_SAMPLE` that succeeded in the minute before ``minute`` (None when none
    did)."""

    minute: datetime
    kind: str
    pending: int
    due: int
    running: int
    due_bounded: bool = False
    claims: int = 0
    claim_p50: float | None = None
    claim_p99: float | None = None


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` quantile of ``values`` with linear interpolation between the
    closest ranks (PostgreSQL's ``percentile_cont``); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def take_samples(now: datetime, jobs: Iterable[Job]) -> list[QueueSample]:
    """The samples of the minute holding ``now`` from every job: one per kind with a
    pending or running job or a sampled claim, and the :data:`ALL_KINDS` sum (always).
    The due/scheduled split is bounded per (kind, tenant) as the health report's is."""
    minute = sample_minute(now)
    groups: dict[tuple[str, str | None], list[int]] = {}  # pending, scheduled, running
    finished: list[Job] = []
    for job in jobs:
        if job.state in (JobState.PENDING, JobState.RUNNING):
            group = groups.setdefault((job.kind, job.tenant), [0, 0, 0])
            if job.state is JobState.RUNNING:
                group[2] += 1
            else:
                group[0] += 1
                group[1] += job.available_at > now
        elif (
            job.state is JobState.SUCCEEDED
            and job.claimed_at is not None
            and job.completed_at is not None
            and minute - _MINUTE <= job.completed_at < minute
        ):
            finished.append(job)
    finished.sort(key=lambda j: j.completed_at or minute, reverse=True)
    waits: dict[str, list[float]] = {}
    for job in finished[:PICKUP_SAMPLE]:
        assert job.claimed_at is not None
        wait = max((job.claimed_at - job.available_at).total_seconds(), 0.0)
        waits.setdefault(job.kind, []).append(wait)
        waits.setdefault(ALL_KINDS, []).append(wait)
    totals: dict[str, list[int]] = {ALL_KINDS: [0, 0, 0, 0]}  # pending, due, running, bounded
    for (kind, _), (pending, scheduled, running) in groups.items():
        capped = min(scheduled, PENDING_SPLIT_BOUND + 1)
        # The due ones are counted only when the scheduled ones pass the bound.
        due_upto = min(pending - scheduled, PENDING_SPLIT_BOUND + 1)
        due, _, bounded = pending_split(pending, capped, due_upto)
        for key in (kind, ALL_KINDS):
            row = totals.setdefault(key, [0, 0, 0, 0])
            row[0] += pending
            row[1] += due
            row[2] += running
            row[3] |= bounded
    for kind in waits:
        totals.setdefault(kind, [0, 0, 0, 0])
    return [
        QueueSample(
            minute=minute,
            kind=kind,
            pending=pending,
            due=due,
            running=running,
            due_bounded=bool(bounded),
            claims=len(waits.get(kind, ())),
            claim_p50=percentile(waits.get(kind, ()), 0.5),
            claim_p99=percentile(waits.get(kind, ()), 0.99),
        )
        for kind, (pending, due, running, bounded) in sorted(totals.items())
    ]


def fold_samples(
    samples: Iterable[QueueSample], since: datetime, bucket: timedelta
) -> list[QueueSample]:
    """The samples taken at or after ``since`` folded per bucket (from ``since``) and
    kind, what ``JobStore.queue_samples(since, bucket)`` returns: ``minute`` is the
    bucket's start; pending, due, running and due_bounded are those of the bucket's last
    sampled minute (the last with an :data:`ALL_KINDS` sample; 0 for a kind it does not
    name); ``claims`` sums the bucket's, ``claim_p50`` is their mean weighted by
    ``claims`` and ``claim_p99`` the largest. Ordered by bucket, then kind."""
    by_bucket: dict[datetime, list[QueueSample]] = {}
    for sample in samples:
        if sample.minute >= since:
            by_bucket.setdefault(bucket_start(sample.minute, since, bucket), []).append(sample)
    folded = []
    for start, rows in sorted(by_bucket.items()):
        last = max((s.minute for s in rows if s.kind == ALL_KINDS), default=None)
        latest = {s.kind: s for s in rows if s.minute == last}
        by_kind: dict[str, list[QueueSample]] = {}
        for sample in rows:
            by_kind.setdefault(sample.kind, []).append(sample)
        for kind, mine in sorted(by_kind.items()):
            claims = sum(s.claims for s in mine)
            weighted = sum((s.claim_p50 or 0.0) * s.claims for s in mine)
            p99s = [s.claim_p99 for s in mine if s.claim_p99 is not None]
            seen = latest.get(kind)
            folded.append(
                QueueSample(
                    minute=start,
                    kind=kind,
                    pending=seen.pending if seen else 0,
                    due=seen.due if seen else 0,
                    running=seen.running if seen else 0,
                    due_bounded=seen.due_bounded if seen else False,
                    claims=claims,
                    claim_p50=weighted / claims if claims else None,
                    claim_p99=max(p99s, default=None),
                )
            )
    return folded


@attrs.frozen
class HistoryBucket:
    """The queue during ``[start, end)``.

    ``finished`` counts the jobs of each kind that finished in the bucket (any final
    state); ``succeeded``, ``failures`` (dead or marked failed) and ``cancelled`` sum every
    kind. ``due`` is each kind's due jobs and ``due_total`` every kind's, from the bucket's
    last sample (None: no sample in the bucket, no roll-up ran); ``due_bounded`` says a
    figure is a lower bound. ``claim_p50`` is the mean of the sampled minutes' medians
    (weighted by their jobs) and ``claim_p99`` the largest of their 99th percentiles, in
    seconds (None: no sampled claim)."""

    start: datetime
    end: datetime
    finished: Mapping[str, int] = attrs.field(factory=dict)
    succeeded: int = 0
    failures: int = 0
    cancelled: int = 0
    due: Mapping[str, int] | None = None
    due_total: int | None = None
    due_bounded: bool = False
    claims: int = 0
    claim_p50: float | None = None
    claim_p99: float | None = None

    @property
    def failure_rate(self) -> float | None:
        """Failures among the jobs that succeeded or failed in the bucket (0 to 1; None
        when none did). Cancelled jobs count on neither side."""
        decided = self.succeeded + self.failures
        return self.failures / decided if decided else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times in ISO 8601, latencies in seconds)."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "finished": dict(self.finished),
            "succeeded": self.succeeded,
            "failures": self.failures,
            "cancelled": self.cancelled,
            "failure_rate": self.failure_rate,
            "due": None if self.due is None else dict(self.due),
            "due_total": self.due_total,
            "due_bounded": self.due_bounded,
            "claims": self.claims,
            "claim_p50": self.claim_p50,
            "claim_p99": self.claim_p99,
        }


@attrs.frozen
class History:
    """The queue over a window ending at ``now`` (``engine.history()``): ``buckets``
    oldest first, each ``bucket`` long (aligned as ``engine.throughput()``'s); ``kinds``
    every kind that finished a job or had a sampled backlog in the window, busiest
    first."""

    now: datetime
    bucket: timedelta
    buckets: tuple[HistoryBucket, ...]
    kinds: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times in ISO 8601, the bucket in seconds)."""
        return {
            "now": self.now.isoformat(),
            "bucket_seconds": self.bucket.total_seconds(),
            "kinds": list(self.kinds),
            "buckets": [b.to_dict() for b in self.buckets],
        }


def history_from(
    now: datetime,
    since: datetime,
    bucket: timedelta,
    count: int,
    finished: Iterable[FinishedCount],
    samples: Iterable[QueueSample],
) -> History:
    """The :class:`History` of ``count`` buckets from ``since`` (from
    ``throughput_window``), every bucket present, from a store's finished counts and its
    samples folded per bucket (:func:`fold_samples`); anything outside the window is
    ignored."""
    slots: list[dict[str, Any]] = [{"finished": {}} for _ in range(count)]
    weight: dict[str, int] = {}
    for row in finished:
        index, rest = divmod(row.start - since, bucket)
        if rest or not 0 <= index < count:
            continue
        slot = slots[index]
        kind = row.kind or "(unknown)"
        slot["finished"][kind] = slot["finished"].get(kind, 0) + row.count
        weight[kind] = weight.get(kind, 0) + row.count
        name = "failures" if row.state in (JobState.DEAD, JobState.FAILED) else row.state.value
        slot[name] = slot.get(name, 0) + row.count
    sampled: dict[int, dict[str, QueueSample]] = {}
    for sample in samples:
        index, rest = divmod(sample.minute - since, bucket)
        if not rest and 0 <= index < count:
            sampled.setdefault(index, {})[sample.kind] = sample
            if sample.kind != ALL_KINDS:
                weight.setdefault(sample.kind, 0)
    buckets = []
    for index, slot in enumerate(slots):
        start = since + index * bucket
        kinds = sampled.get(index, {})
        total = kinds.get(ALL_KINDS)
        buckets.append(
            HistoryBucket(
                start=start,
                end=start + bucket,
                finished=slot["finished"],
                succeeded=slot.get("succeeded", 0),
                failures=slot.get("failures", 0),
                cancelled=slot.get("cancelled", 0),
                due=None
                if total is None
                else {k: s.due for k, s in kinds.items() if k != ALL_KINDS and s.due},
                due_total=None if total is None else total.due,
                due_bounded=total is not None and total.due_bounded,
                claims=total.claims if total else 0,
                claim_p50=total.claim_p50 if total else None,
                claim_p99=total.claim_p99 if total else None,
            )
        )
    ranked = tuple(sorted(weight, key=lambda k: (-weight[k], k)))
    return History(now=now, bucket=bucket, buckets=tuple(buckets), kinds=ranked)
