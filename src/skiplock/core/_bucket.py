"""Token bucket (J6), pure: time comes in as ``now`` (monotonic seconds)."""

from __future__ import annotations

import attrs


@attrs.frozen
class RateLimit:
    """``rps`` tokens per second, at most ``burst`` stored."""

    rps: float
    burst: int


@attrs.frozen
class TokenBucket:
    """Bucket state at time ``updated`` (monotonic seconds)."""

    limit: RateLimit
    tokens: float
    updated: float


def take(bucket: TokenBucket, now: float) -> tuple[TokenBucket, float]:
    """Try to take one token. Returns (new bucket, wait); wait == 0 means taken, else seconds until one is available."""
    raise NotImplementedError
