"""Why is this job waiting? (issue 45): the reasons a pending job has not started, from
the rules a claim applies, as a pure function of what the store reads (the job, the
controls, the health snapshot, the holders of its concurrency key and the due jobs
ahead of it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from ._bucket import take
from ._concurrency import key_limit
from ._health_report import format_duration
from ._rates import bucket_maps, rate_holds
from ._types import JobState

if TYPE_CHECKING:
    from ._bucket import RateTable, TokenBucket
    from ._controls import Controls
    from ._health_snapshot import HealthSnapshot
    from ._types import Job

#: How many due jobs ahead of a job :func:`explain_wait`'s callers count at most (more
#: are reported as "at least" this many), and how many running jobs they search for the
#: holders of its concurrency key.
WAIT_COUNT_BOUND = 1000

#: The reasons' codes, in the order :func:`explain_wait` lists them.
WAIT_CODES = (
    "not_pending",
    "due_later",
    "paused",
    "rate_limited",
    "concurrency_full",
    "no_worker",
    "behind",
    "ready",
)


@attrs.frozen
class WaitReason:
    """One reason a job waits: ``code`` (one of :data:`WAIT_CODES`), a sentence, when it
    ends if known (``when``: the due time, the next token) and JSON-ready ``details``."""

    code: str
    message: str
    when: datetime | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: ``code``, ``message``, ``when`` (ISO 8601 or null), ``details``."""
        when = None if self.when is None else self.when.isoformat()
        return {
            "code": self.code,
            "message": self.message,
            "when": when,
            "details": dict(self.details),
        }


@attrs.frozen
class JobWait:
    """Why job ``job_id`` (in ``state``) has not started, as of ``checked_at`` (the
    store's clock): every reason that holds now. A pending job nothing holds back has
    the one reason ``ready``; a job that is not pending the one reason ``not_pending``."""

    job_id: int
    state: JobState
    checked_at: datetime
    reasons: tuple[WaitReason, ...]

    @property
    def codes(self) -> list[str]:
        """The reasons' codes, in order."""
        return [r.code for r in self.reasons]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: ``job_id``, ``state``, ``checked_at``, ``reasons``."""
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "checked_at": self.checked_at.isoformat(),
            "reasons": [r.to_json() for r in self.reasons],
        }


def _next_token(bucket: TokenBucket, now: datetime) -> datetime:
    """When ``bucket``, empty at ``now``, has a token again."""
    return now + timedelta(seconds=take(bucket, now.timestamp())[1])


def explain_wait(
    job: Job,
    snapshot: HealthSnapshot,
    controls: Controls,
    *,
    rates: RateTable,
    cluster_limits: Mapping[str, int],
    worker_timeout: timedelta,
    holders: Sequence[int] = (),
    ahead: int = 0,
    ahead_bounded: bool = False,
) -> JobWait:
    """Why ``job`` waits at ``snapshot.now``. ``holders``: the running jobs holding its
    concurrency key; ``ahead``: the due pending jobs of its kind a claim takes before it
    (a lower bound when ``ahead_bounded``). The rules are the claim's: a pause covering
    it, an empty token bucket of its pair or its kind's provider (``rates``), its kind
    running ``cluster_limits`` jobs, its concurrency key full, no live worker (a
    heartbeat within ``worker_timeout``) claiming its kind and tenant."""
    now = snapshot.now
    if job.state is not JobState.PENDING:
        reason = WaitReason("not_pending", f"the job is {job.state.value}, not waiting to start")
        return JobWait(job.id, job.state, now, (reason,))
    kind, tenant = job.kind, job.tenant
    reasons: list[WaitReason] = []
    if job.available_at > now:
        wait = format_duration(job.available_at - now)
        reasons.append(
            WaitReason(
                "due_later",
                f"it is due at {job.available_at.isoformat()} (in {wait})",
                job.available_at,
            )
        )
    pause = controls.pause_of(kind, tenant)
    if pause is not None:
        scope = (
            "its kind"
            if pause.tenant is None
            else "its tenant"
            if pause.kind is None
            else "its kind and tenant"
        )
        since = "" if pause.since is None else f" since {pause.since.isoformat()}"
        by = "" if pause.actor is None else f" by {pause.actor}"
        why = "" if not pause.reason else f": {pause.reason}"
        reasons.append(
            WaitReason("paused", f"{scope} is paused{by}{since}{why}", details=pause.to_json())
        )
    reasons.extend(_rate_reasons(kind, tenant, snapshot, rates))
    reasons.extend(_cap_reasons(job, snapshot, cluster_limits, holders, controls))
    live = [w for w in snapshot.workers if w.heartbeat_at >= now - worker_timeout]
    if not any(w.claims(kind, tenant) for w in live):
        who = f"kind {kind!r}" + ("" if tenant is None else f" of tenant {tenant!r}")
        reasons.append(
            WaitReason(
                "no_worker",
                f"no live worker claims {who} ({len(live)} live worker(s))",
                details={"live_workers": len(live)},
            )
        )
    if ahead and job.available_at <= now:
        count = f"at least {ahead}" if ahead_bounded else str(ahead)
        reasons.append(
            WaitReason(
                "behind",
                f"{count} due job(s) of kind {kind!r} come first (higher priority, or due earlier)",
                details={"count": ahead, "bounded": ahead_bounded},
            )
        )
    if not reasons:
        reasons.append(
            WaitReason("ready", "nothing holds it back: a live worker claims it at its next poll")
        )
    return JobWait(job.id, job.state, now, tuple(reasons))


def _rate_reasons(
    kind: str, tenant: str | None, snapshot: HealthSnapshot, rates: RateTable
) -> list[WaitReason]:
    """An empty bucket of the pair or of the kind's provider, as a claim decides it
    (:func:`~._rates.rate_holds`)."""
    buckets = bucket_maps(snapshot.buckets)
    now = snapshot.now
    bucket, provider = rate_holds(rates, (kind, tenant), now.timestamp(), buckets)
    found: list[WaitReason] = []
    if bucket is not None:
        when = _next_token(bucket, now)
        limit = bucket.limit
        found.append(
            WaitReason(
                "rate_limited",
                f"its rate limit ({limit.rps:g}/s, burst {limit.burst}) is used up: "
                f"next token at {when.isoformat()}",
                when,
                {"scope": "pair", "rps": limit.rps, "burst": limit.burst},
            )
        )
    if provider is not None:
        when = _next_token(buckets[1][provider], now)
        found.append(
            WaitReason(
                "rate_limited",
                f"its provider {provider!r}'s cap is used up: next token at {when.isoformat()}",
                when,
                {"scope": "provider", "provider": provider},
            )
        )
    return found


def _cap_reasons(
    job: Job,
    snapshot: HealthSnapshot,
    cluster_limits: Mapping[str, int],
    holders: Sequence[int],
    controls: Controls,
) -> list[WaitReason]:
    """Its concurrency key full (``holders`` running; the key's limit set at run time
    over the job's own), its kind at its cluster limit (``cluster_limits``: in force)."""
    found: list[WaitReason] = []
    key = job.concurrency_key
    cap = key_limit(controls.concurrency, key, job.concurrency_limit)
    if key is not None and cap is not None and len(holders) >= cap:
        ids = ", ".join(str(i) for i in holders)
        found.append(
            WaitReason(
                "concurrency_full",
                f"concurrency key {key!r} is full ({len(holders)} of {cap} running: job(s) {ids})",
                details={"scope": "key", "key": key, "limit": cap, "holders": list(holders)},
            )
        )
    limit = cluster_limits.get(job.kind)
    running = sum(s.running for s in snapshot.queues if s.kind == job.kind)
    if limit is not None and running >= limit:
        found.append(
            WaitReason(
                "concurrency_full",
                f"kind {job.kind!r} runs as many jobs as its cluster limit allows "
                f"({running} of {limit})",
                details={"scope": "kind", "limit": limit, "running": running},
            )
        )
    return found
