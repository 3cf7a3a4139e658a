"""Worker capacity planning: how many jobs of which kinds to claim now."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from ._bucket import RateTable, refill
from ._claims import ClaimRequest

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime

    from ._bucket import RateLimit, TokenBucket
    from ._types import Job

Pair = tuple[str, str | None]

#: A capped (kind, tenant) pair of a claim and how many of its jobs the claim may take.
PairCap = tuple[str, str | None, int]


def claim_order(job: Job) -> tuple[int, datetime, int]:
    """Sort key of the claim order: priority DESC, available_at ASC, id ASC."""
    return (-job.priority, job.available_at, job.id)


def capped_kinds(request: ClaimRequest) -> list[str]:
    """Kinds with a per-claim or cluster cap that this claim may still take (sorted)."""
    limited = set(request.kind_limits) | set(request.cluster_limits)
    if request.kinds is not None:
        limited &= request.kinds
    return sorted(limited - request.excluded_kinds)


def kind_caps(request: ClaimRequest, running: Mapping[str, int]) -> dict[str, int]:
    """How many jobs of each of :func:`capped_kinds` this claim may take (0: none).

    ``running`` counts the running jobs of the cluster-limited kinds (cluster-wide).
    """
    result: dict[str, int] = {}
    for kind in capped_kinds(request):
        cap = request.limit
        if kind in request.kind_limits:
            cap = min(cap, request.kind_limits[kind])
        if kind in request.cluster_limits:
            cap = min(cap, request.cluster_limits[kind] - running.get(kind, 0))
        result[kind] = max(cap, 0)
    return result


def pair_order(pair: Pair) -> tuple[str, bool, str]:
    """A total order of (kind, tenant) pairs (no tenant first)."""
    kind, tenant = pair
    return (kind, tenant is not None, tenant or "")


def pair_caps(request: ClaimRequest, caps: Mapping[str, int]) -> list[PairCap]:
    """The pair limits of ``request`` that bind, with what each pair may take (0: none).

    ``caps`` is what each capped kind may take in this claim (:func:`kind_caps`). A pair
    limit that cannot bind (at least its kind's cap, or the claim's limit) is left out,
    and so is a pair this claim cannot take anyway (kind not requested, excluded, full;
    tenant not requested; pair excluded).
    """
    result: list[PairCap] = []
    for pair in sorted(request.pair_limits, key=pair_order):
        kind, tenant = pair
        if (
            (request.kinds is not None and kind not in request.kinds)
            or kind in request.excluded_kinds
            or (request.tenants is not None and (tenant is None or tenant not in request.tenants))
            or (tenant is not None and tenant in request.excluded_tenants)
            or pair in request.excluded
        ):
            continue
        cap = caps.get(kind, request.limit)
        if cap <= 0:
            continue
        n = max(min(request.pair_limits[pair], cap), 0)
        if n < cap:
            result.append((kind, tenant, n))
    return result


@attrs.frozen
class ThrottleLimits:
    """What token buckets allow one claim to take (see :func:`throttle_limits`).

    - ``excluded``: pairs whose bucket is empty (claim none).
    - ``excluded_kinds``: kinds whose provider cap is empty.
    - ``pair_limits``: pairs whose bucket holds some whole tokens: claim at most that many.
    - ``kind_caps``: at most this many jobs of a rate-limited or capped kind in one claim.
    - ``retry_in``: seconds until the next empty bucket has a token (None: none empty), so
      a worker with nothing else to do wakes when throttled work becomes claimable.
    """

    excluded: frozenset[Pair] = frozenset()
    excluded_kinds: frozenset[str] = frozenset()
    pair_limits: Mapping[Pair, int] = attrs.field(factory=dict)
    kind_caps: Mapping[str, int] = attrs.field(factory=dict)
    retry_in: float | None = None


def _whole_tokens(bucket: TokenBucket, now: float) -> tuple[int, float]:
    """Whole tokens in ``bucket`` at ``now``, and seconds until the next one."""
    bucket = refill(bucket, now)
    whole = math.floor(bucket.tokens)
    if whole >= 1:
        return whole, 0.0
    wait = max(0.0, bucket.updated - now) + (1 - bucket.tokens) / bucket.limit.rps
    return 0, wait


def throttle_limits(
    *,
    now: float,
    rate_limits: Mapping[str, RateLimit],
    pair_buckets: Iterable[tuple[Pair, TokenBucket]],
    provider_caps: Mapping[str, tuple[str, RateLimit]],
    provider_buckets: Mapping[str, TokenBucket],
    pair_rates: Mapping[Pair, RateLimit] | None = None,
) -> ThrottleLimits:
    """Turn token buckets into claim limits, so a claim never takes more jobs of a
    throttled pair than its bucket can start now (J6).

    ``rate_limits`` are the per-(kind, tenant) limits by kind; ``pair_buckets`` the buckets
    drawn from so far (a pair without one is full: ``burst`` tokens). A pair's limit is
    its whole tokens (none: excluded); a rate-limited kind takes at most ``burst`` jobs of
    pairs without a bucket plus its pairs' limits. ``pair_rates`` are the pairs with a
    limit of their own (over their kind's: :attr:`RateTable.pairs <._bucket.RateTable>`,
    from :class:`~._controls.EffectiveLimits`): such a pair takes at most its whole tokens
    (``burst`` without a bucket); its kind's cap does not grow for it (the pairs of the
    kind's default could take that room), so one claim may take fewer of its jobs than it
    could start, never more. ``provider_caps`` maps a kind to its provider and cap: each
    kind of a provider takes at most the provider's whole tokens (none: the kind is
    excluded).
    """
    excluded: set[Pair] = set()
    pair_limits: dict[Pair, int] = {}
    retry_in: float | None = None
    own = pair_rates or {}
    kind_caps = {kind: limit.burst for kind, limit in rate_limits.items()}
    for pair, bucket in pair_buckets:
        limit = own.get(pair) or rate_limits.get(pair[0])
        if limit is None or bucket.limit != limit:
            continue  # the pair's limit changed: the next take starts a full bucket
        whole, wait = _whole_tokens(bucket, now)
        if whole >= limit.burst:
            continue  # full: like a pair never drawn from
        if whole == 0:
            excluded.add(pair)
            retry_in = wait if retry_in is None else min(retry_in, wait)
        else:
            pair_limits[pair] = whole
            if pair[0] in kind_caps and pair not in own:
                kind_caps[pair[0]] += whole
    for pair, limit in sorted(own.items(), key=lambda item: pair_order(item[0])):
        if pair not in excluded and pair not in pair_limits:
            # Full (no bucket yet, or a full one): at most its own burst.
            pair_limits[pair] = limit.burst
    excluded_kinds: set[str] = set()
    for kind, (provider, cap) in provider_caps.items():
        provider_bucket = provider_buckets.get(provider)
        if provider_bucket is None or provider_bucket.limit != cap:
            whole, wait = cap.burst, 0.0  # full, or restarts full with the new cap
        else:
            whole, wait = _whole_tokens(provider_bucket, now)
        if whole == 0:
            excluded_kinds.add(kind)
            retry_in = wait if retry_in is None else min(retry_in, wait)
        else:
            kind_caps[kind] = min(kind_caps.get(kind, whole), whole)
    return ThrottleLimits(
        excluded=frozenset(excluded),
        excluded_kinds=frozenset(excluded_kinds),
        pair_limits=pair_limits,
        kind_caps=kind_caps,
        retry_in=retry_in,
    )


def charged_positions(suspects: Sequence[bool], start_now: int | None) -> list[int]:
    """Which claimed jobs (positions in claim order) start at once and pay their attempt.

    The first ``start_now`` (all if None) — unless one of them is a suspect (a job whose
    last run ended with its worker vanishing; it may kill workers): then only the first
    such suspect starts, alone, so no innocent job is charged for a crash it never took
    part in. The others are held. Stores apply this rule; a claim reports what it
    charged (``ClaimedJobs.charged``), which workers read.
    """
    n = len(suspects) if start_now is None else max(0, min(start_now, len(suspects)))
    for position in range(n):
        if suspects[position]:
            return [position]
    return list(range(n))


def plan_claim(
    *,
    worker_id: str,
    free_slots: int,
    batch_size: int,
    running: Mapping[str, int],
    node_limits: Mapping[str, int],
    cluster_limits: Mapping[str, int],
    kinds: frozenset[str] | None,
    tenants: frozenset[str] | None,
    excluded: frozenset[Pair] = frozenset(),
    excluded_kinds: frozenset[str] = frozenset(),
    excluded_tenants: frozenset[str] = frozenset(),
    pair_limits: Mapping[Pair, int] | None = None,
    kind_caps: Mapping[str, int] | None = None,
    start_now: int | None = None,
    max_attempts: Mapping[str, int] | None = None,
    prefetch_limits: Mapping[str, int] | None = None,
    rates: RateTable | None = None,
    with_errors: bool = False,
) -> ClaimRequest | None:
    """Plan one claim; ``None`` when nothing may be claimed (no free slot, every kind full).

    ``running`` counts this node's held jobs per kind (running or prefetched, on every
    worker of the process); kinds at their node limit are excluded, the others capped at
    what is left. ``kind_caps`` (e.g. from :func:`throttle_limits`) cap kinds further; a
    cap of 0 excludes the kind. Kinds that are already excluded stay excluded. Cluster
    limits pass through for the kinds that may still be claimed; the store enforces them
    strictly. ``start_now`` is capped at the claim's limit. ``prefetch_limits``: at most
    ``start_now`` plus this many jobs of the kind (the rest would wait unstarted: no
    hoarding); with ``start_now`` None every job starts, so they do not apply.
    ``rates`` pass through to the store (cluster-wide rates) for the kinds still claimed;
    ``with_errors`` asks for the claimed jobs' earlier errors (``ClaimRequest``).
    """
    limit = min(free_slots, batch_size)
    if limit <= 0:
        return None
    excluded_all = set(excluded_kinds)
    kind_limits: dict[str, int] = {}
    caps: dict[str, int] = {
        kind: node_limit - running.get(kind, 0) for kind, node_limit in node_limits.items()
    }
    for kind, cap in (kind_caps or {}).items():
        caps[kind] = min(caps.get(kind, cap), cap)
    if start_now is not None:
        starting = max(0, min(start_now, limit))
        for kind, extra in (prefetch_limits or {}).items():
            caps[kind] = min(caps.get(kind, starting + extra), starting + extra)
    for kind, left in caps.items():
        if kind in excluded_all:
            continue
        if left <= 0:
            excluded_all.add(kind)
        else:
            kind_limits[kind] = min(left, limit)
    if kinds is not None and kinds <= excluded_all:
        return None
    if tenants is not None and tenants <= excluded_tenants:
        return None
    return ClaimRequest(
        worker_id=worker_id,
        limit=limit,
        kinds=kinds,
        tenants=tenants,
        kind_limits=kind_limits,
        cluster_limits={k: v for k, v in cluster_limits.items() if k not in excluded_all},
        excluded=excluded,
        excluded_kinds=frozenset(excluded_all),
        excluded_tenants=excluded_tenants,
        pair_limits={
            pair: min(n, limit)
            for pair, n in (pair_limits or {}).items()
            if pair[0] not in excluded_all
        },
        start_now=None if start_now is None else max(0, min(start_now, limit)),
        max_attempts=dict(max_attempts or {}),
        rates=_open_rates(rates, excluded_all),
        with_errors=with_errors,
    )


def _open_rates(rates: RateTable | None, excluded: set[str]) -> RateTable:
    """The part of ``rates`` about kinds a claim may still take."""
    if not rates:
        return RateTable()
    return rates.only(k for k in rates.limited_kinds() if k not in excluded)
