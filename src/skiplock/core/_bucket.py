"""Token bucket (J6), pure: time comes in as ``now`` (monotonic seconds)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from ._errors import ValidationError


@attrs.frozen
class RateLimit:
    """``rps`` tokens per second, at most ``burst`` stored."""

    rps: float
    burst: int

    def __attrs_post_init__(self) -> None:
        rps: object = self.rps
        if (
            isinstance(rps, bool)
            or not isinstance(rps, int | float)
            or not (math.isfinite(rps) and rps > 0)
        ):
            raise ValidationError(f"rate limit rps must be > 0, got {self.rps!r}")
        burst: object = self.burst
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValidationError(f"rate limit burst must be an int >= 1, got {self.burst!r}")


@attrs.frozen
class TokenBucket:
    """Bucket state at time ``updated`` (monotonic seconds)."""

    limit: RateLimit
    tokens: float
    updated: float


def new_bucket(limit: RateLimit, now: float) -> TokenBucket:
    """A full bucket at ``now``."""
    return TokenBucket(limit=limit, tokens=float(limit.burst), updated=now)


def refill(bucket: TokenBucket, now: float) -> TokenBucket:
    """The bucket at ``now``; a clock that went backwards adds nothing and keeps ``updated``."""
    if now <= bucket.updated:
        return bucket
    limit = bucket.limit
    tokens = min(float(limit.burst), bucket.tokens + limit.rps * (now - bucket.updated))
    return TokenBucket(limit=limit, tokens=tokens, updated=now)


def take(bucket: TokenBucket, now: float) -> tuple[TokenBucket, float]:
    """Try to take one token.

    Returns (new bucket, wait): wait == 0 means taken; else the token was not taken and
    ``wait`` > 0 is the number of seconds until one is available (taking at ``now + wait``
    succeeds).
    """
    bucket = refill(bucket, now)
    if bucket.tokens >= 1:
        return attrs.evolve(bucket, tokens=bucket.tokens - 1), 0.0
    # ``updated`` may lie ahead of ``now`` when the clock went backwards.
    wait = bucket.updated - now + (1 - bucket.tokens) / bucket.limit.rps
    # Float rounding could leave the refill after exactly ``wait`` just short of one token;
    # nudge until taking at ``now + wait`` is guaranteed to succeed.
    while refill(bucket, now + wait).tokens < 1:
        wait += max(math.ulp(wait), math.ulp(now + wait))
    return bucket, wait


Pair = tuple[str, str | None]


@attrs.frozen
class RateTable:
    """The rate limits a claim honours, as data a store can apply (cluster-wide rates).

    - ``kinds``: a kind's rate; each of its (kind, tenant) pairs has a bucket of its own
      with this limit.
    - ``pairs``: the rate of one (kind, tenant) pair, in place of its kind's.
    - ``providers``: kind -> (provider, cap): every kind of a provider draws from the
      provider's one bucket as well.

    :meth:`rate_for` is the one lookup of a pair's rate; an empty table limits nothing.
    Workers and the health report build it from the limits in force
    (:meth:`EffectiveLimits.table <._controls.EffectiveLimits.table>`: run-time limits over
    the policies), never by hand.
    """

    kinds: Mapping[str, RateLimit] = attrs.field(factory=dict)
    pairs: Mapping[Pair, RateLimit] = attrs.field(factory=dict)
    providers: Mapping[str, tuple[str, RateLimit]] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return bool(self.kinds or self.pairs or self.providers)

    def rate_for(self, kind: str, tenant: str | None) -> RateLimit | None:
        """The rate of the (kind, tenant) pair's bucket (None: not rate-limited)."""
        return self.pairs.get((kind, tenant), self.kinds.get(kind))

    def limited_kinds(self) -> frozenset[str]:
        """Kinds with a rate (for any tenant) or a provider cap."""
        return frozenset(self.kinds) | {k for k, _ in self.pairs} | frozenset(self.providers)

    def only(self, kinds: Iterable[str]) -> RateTable:
        """The part of this table about ``kinds``."""
        wanted = frozenset(kinds)
        return RateTable(
            kinds={k: v for k, v in self.kinds.items() if k in wanted},
            pairs={p: v for p, v in self.pairs.items() if p[0] in wanted},
            providers={k: v for k, v in self.providers.items() if k in wanted},
        )


def charge(bucket: TokenBucket | None, limit: RateLimit, n: int, now: float) -> TokenBucket:
    """``bucket`` at ``now`` with ``n`` tokens taken (a claim took ``n`` jobs it allowed).

    No bucket yet, or one of another limit (the limit changed), starts full, as
    :func:`~skiplock.core._capacity.throttle_limits` counts it.
    """
    if bucket is None or bucket.limit != limit:
        bucket = new_bucket(limit, now)
    bucket = refill(bucket, now)
    return attrs.evolve(bucket, tokens=bucket.tokens - n)
