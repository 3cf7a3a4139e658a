"""Token buckets shared by all workers of one engine (J6).

Buckets live in the process, as the seed specifies ("Token-Bucket im Worker-Prozess"):
every worker of one engine draws from the same buckets, but separate processes (and
separate engines) each have their own, so a cluster-wide limit must be divided by the
number of worker processes.
"""

from __future__ import annotations

from threading import Lock
from typing import TYPE_CHECKING

from skiplock.core import TokenBucket, take

if TYPE_CHECKING:
    from skiplock.core import RateLimit


class RateLimiter:
    """The ``(kind, tenant)`` buckets and the provider caps' buckets of one engine.

    Thread-safe (a plain lock, never held across an await), so both the threads of sync
    workers and the tasks of async ones may share it.
    """

    def __init__(self) -> None:
        self._lock = Lock()
        self._pairs: dict[tuple[str, str | None], TokenBucket] = {}
        self._caps: dict[str, TokenBucket] = {}

    def take(
        self,
        pair: tuple[str, str | None],
        limit: RateLimit | None,
        provider: str | None,
        cap: RateLimit | None,
        now: float,
    ) -> tuple[float, float]:
        """Take one token from ``pair``'s bucket (if ``limit``) and the provider's (if
        ``cap``), both or neither. Returns the seconds until each would have one (0.0:
        taken, or no limit)."""
        with self._lock:
            pair_bucket, pair_wait = _take(self._pairs.get(pair), limit, now)
            cap_bucket, cap_wait = _take(
                self._caps.get(provider) if provider is not None else None, cap, now
            )
            if pair_wait == 0 and cap_wait == 0:
                if pair_bucket is not None:
                    self._pairs[pair] = pair_bucket
                if cap_bucket is not None and provider is not None:
                    self._caps[provider] = cap_bucket
            return pair_wait, cap_wait


def _take(
    bucket: TokenBucket | None, limit: RateLimit | None, now: float
) -> tuple[TokenBucket | None, float]:
    if limit is None:
        return None, 0.0
    if bucket is None or bucket.limit != limit:
        bucket = TokenBucket(limit=limit, tokens=float(limit.burst), updated=now)
    return take(bucket, now)
