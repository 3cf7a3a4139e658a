"""Cluster-wide rates: what a store does with :attr:`ClaimRequest.rates` (pure).

A store that applies a request's rate table keeps one token bucket per (kind, tenant)
pair and one per provider, shared by every claimer. In the claim's critical section (the
rate-limited kinds locked) it reads the buckets of the kinds the claim may take, narrows
the request with :func:`throttled_request` (the same rules a process applies to its own
buckets: :func:`~skiplock.core._capacity.throttle_limits`), claims, and writes back the
buckets :func:`charges` computes for the jobs it took. So no claim takes a job its
bucket cannot pay for now, however many processes claim.

Bucket times are seconds on the store's clock (``now``); a pair without a bucket is
full.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import attrs

from ._bucket import RateTable, charge
from ._capacity import capped_kinds, pair_order, throttle_limits
from ._health_snapshot import PAIR_SCOPE, PROVIDER_SCOPE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._bucket import Pair, TokenBucket
    from ._capacity import ThrottleLimits
    from ._claims import ClaimRequest
    from ._controls import Limit
    from ._health_snapshot import BucketState
    from ._types import Job


def rated_kinds(request: ClaimRequest) -> list[str]:
    """The kinds of ``request.rates`` this claim may take (sorted; empty: the claim pays
    nothing for rates)."""
    if not request.rates:
        return []
    kinds = request.rates.limited_kinds()
    if request.kinds is not None:
        kinds &= request.kinds
    return sorted(kinds - request.excluded_kinds)


def rated_providers(request: ClaimRequest, kinds: Iterable[str]) -> list[str]:
    """The providers of ``kinds`` in ``request.rates`` (sorted)."""
    providers = request.rates.providers
    return sorted({providers[k][0] for k in kinds if k in providers})


def table_limits(
    rates: RateTable,
    now: float,
    pair_buckets: Iterable[tuple[Pair, TokenBucket]],
    provider_buckets: Mapping[str, TokenBucket],
) -> ThrottleLimits:
    """What the buckets allow one claim of the kinds of ``rates`` to take at ``now``
    (:func:`~skiplock.core._capacity.throttle_limits` over a rate table)."""
    return throttle_limits(
        now=now,
        rate_limits=rates.kinds,
        pair_buckets=pair_buckets,
        provider_caps=rates.providers,
        provider_buckets=provider_buckets,
        pair_rates=rates.pairs,
    )


def throttled_request(
    request: ClaimRequest,
    *,
    now: float,
    pair_buckets: Iterable[tuple[Pair, TokenBucket]],
    provider_buckets: Mapping[str, TokenBucket],
) -> tuple[ClaimRequest, ThrottleLimits]:
    """``request`` narrowed to what the shared buckets can pay for at ``now``, and the
    limits found (``retry_in``: when the next empty bucket has a token).

    Empty buckets exclude their pair (or, a provider's, its kinds); a partly drawn one
    caps its pair; a rate-limited kind takes at most what its buckets hold together.
    """
    table = request.rates.only(rated_kinds(request))
    limits = table_limits(table, now, pair_buckets, provider_buckets)
    kind_limits = dict(request.kind_limits)
    excluded_kinds = set(request.excluded_kinds) | limits.excluded_kinds
    kind_caps = dict(limits.kind_caps)
    _share_providers(kind_caps, table, excluded_kinds, now)
    for kind, cap in kind_caps.items():
        cap = min(cap, kind_limits.get(kind, cap), request.limit)
        if cap <= 0:
            excluded_kinds.add(kind)
        else:
            kind_limits[kind] = cap
    pair_limits = dict(request.pair_limits)
    for pair, n in limits.pair_limits.items():
        pair_limits[pair] = min(n, pair_limits.get(pair, n), request.limit)
    narrowed = attrs.evolve(
        request,
        kind_limits={k: v for k, v in kind_limits.items() if k not in excluded_kinds},
        excluded=request.excluded | limits.excluded,
        excluded_kinds=frozenset(excluded_kinds),
        pair_limits=pair_limits,
    )
    return narrowed, limits


def _share_providers(
    kind_caps: dict[str, int], table: RateTable, excluded: set[str], now: float
) -> None:
    """Split each provider's whole tokens among its kinds in the claim, so the kinds
    together take no more than the provider can pay for (one claim cannot cap a group of
    kinds). The first kinds get the odd tokens, starting at a kind that moves with
    ``now``, so none is left out for good."""
    groups: dict[str, list[str]] = {}
    for kind, (provider, _) in sorted(table.providers.items()):
        if kind not in excluded and kind in kind_caps:
            groups.setdefault(provider, []).append(kind)
    for kinds in groups.values():
        if len(kinds) < 2:
            continue
        whole = max(kind_caps[k] for k in kinds)  # a provider's kinds share its tokens
        start = int(now) % len(kinds)
        for i, kind in enumerate(kinds[start:] + kinds[:start]):
            share = whole // len(kinds) + (1 if i < whole % len(kinds) else 0)
            kind_caps[kind] = min(kind_caps[kind], share)


def charges(
    request: ClaimRequest,
    jobs: Iterable[Job],
    *,
    now: float,
    pair_buckets: Mapping[Pair, TokenBucket],
    provider_buckets: Mapping[str, TokenBucket],
) -> tuple[list[tuple[Pair, TokenBucket]], list[tuple[str, TokenBucket]]]:
    """The buckets to store after a claim under ``request.rates`` took ``jobs``: one
    token per job from its pair's bucket and its provider's (only the buckets drawn
    from, in a stable order)."""
    table = request.rates
    pairs: Counter[Pair] = Counter()
    providers: Counter[str] = Counter()
    for job in jobs:
        pairs[job.kind, job.tenant] += 1
        provider = table.providers.get(job.kind)
        if provider is not None:
            providers[provider[0]] += 1
    pair_rows: list[tuple[Pair, TokenBucket]] = []
    for pair in sorted(pairs, key=pair_order):
        limit = table.rate_for(*pair)
        if limit is not None:
            pair_rows.append((pair, charge(pair_buckets.get(pair), limit, pairs[pair], now)))
    caps = {name: cap for name, cap in table.providers.values()}
    provider_rows = [
        (name, charge(provider_buckets.get(name), caps[name], providers[name], now))
        for name in sorted(providers)
    ]
    return pair_rows, provider_rows


def claim_is_serialized(request: ClaimRequest) -> bool:
    """Whether a claim of ``request`` counts or charges shared state under kind locks
    (a cluster limit or a cluster-wide rate): then it needs a transaction."""
    return bool(rated_kinds(request)) or any(
        k in request.cluster_limits for k in capped_kinds(request)
    )


def outlived_buckets(
    cleared: Limit,
    remaining: Iterable[Limit],
    pair_buckets: Mapping[Pair, TokenBucket],
    provider_buckets: Mapping[str, TokenBucket],
) -> tuple[list[Pair], list[str]]:
    """The buckets clearing the run-time limit ``cleared`` drops (issue 45): those
    counted under it, so they restart full as after any change of limit, and nothing
    reads a used-up bucket of a limit no longer in force. A provider's cap: its bucket;
    a pair's limit: its bucket; a kind's default: the buckets of its pairs without a
    limit of their own in ``remaining`` (the limits left). Only buckets of the cleared
    rate and burst: a rate the workers' code declares for the kind draws from a bucket
    of its own limit, which stays (a code rate equal to the cleared one restarts full)."""
    if cleared.provider is not None:
        bucket = provider_buckets.get(cleared.provider)
        gone = bucket is not None and bucket.limit == cleared.limit
        return [], [cleared.provider] if gone else []
    own = {(x.kind, x.tenant) for x in remaining if x.kind is not None and x.tenant is not None}
    pairs = [
        pair
        for pair, bucket in pair_buckets.items()
        if pair[0] == cleared.kind
        and bucket.limit == cleared.limit
        and (pair[1] == cleared.tenant if cleared.tenant is not None else pair not in own)
    ]
    return sorted(pairs, key=pair_order), []


#: The stored buckets by (kind, tenant) pair and by provider.
StoredBuckets = tuple["Mapping[Pair, TokenBucket]", "Mapping[str, TokenBucket]"]


def bucket_maps(buckets: Iterable[BucketState]) -> StoredBuckets:
    """The stored buckets (a health snapshot's) by pair and by provider."""
    pairs = {(b.name, b.tenant): b.bucket for b in buckets if b.scope == PAIR_SCOPE}
    providers = {b.name: b.bucket for b in buckets if b.scope == PROVIDER_SCOPE}
    return pairs, providers


def rate_holds(
    rates: RateTable, pair: Pair, now: float, buckets: StoredBuckets
) -> tuple[TokenBucket | None, str | None]:
    """Whether a claim at ``now`` leaves ``pair`` out for its rates (issue 45: ``why()``
    and the health report ask this, and a claim decides it by the same
    :func:`table_limits`): its pair's bucket if empty, its provider's name if that
    bucket is empty. ``rates``: the rates in force the reader knows; a bucket counted
    under another limit counts as full. A pair with a bucket but no rate ``rates``
    knows of draws under a rate declared in the workers' code (a reader without that
    code sees it only in the store): the bucket's own limit is that rate, until the
    bucket refills (a cleared limit's buckets are gone: :func:`outlived_buckets`).
    ``buckets``: the stored ones by pair and by provider (:func:`bucket_maps`)."""
    pair_buckets, provider_buckets = buckets
    kind = pair[0]
    table = rates.only([kind])
    bucket = pair_buckets.get(pair)
    drawn = [] if bucket is None else [(pair, bucket)]
    if bucket is not None and table.rate_for(*pair) is None:
        table = attrs.evolve(table, pairs={**table.pairs, pair: bucket.limit})
    limits = table_limits(table, now, drawn, provider_buckets)
    provider = table.providers[kind][0] if kind in limits.excluded_kinds else None
    return (bucket if pair in limits.excluded else None), provider
