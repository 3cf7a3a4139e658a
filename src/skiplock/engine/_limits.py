"""Limits shared by every worker of one engine in one process: token buckets (J6) and
per-node slots.

Both live in the process (J6, docs/requirements.md): every worker of one engine draws
from the same buckets and counts against the same node limits, but separate processes
(and separate engines) each have their own. The buckets serve ``rate_limit_scope =
"process"``; with the default, ``"cluster"``, rates are the store's business (one bucket
per pair in the store, :attr:`ClaimRequest.rates <skiplock.core.ClaimRequest>`).
Thread-safe (a plain lock, never held across an await), so the threads of sync workers
and the tasks of async ones may share them.
"""

from __future__ import annotations

from collections import Counter
from threading import Lock
from typing import TYPE_CHECKING

from skiplock.core.rules import table_limits, take
from skiplock.core.store import RateTable, ThrottleLimits, TokenBucket

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from skiplock.core import ClaimRequest, RateLimit

Pair = tuple[str, str | None]


class RateLimiter:
    """The ``(kind, tenant)`` buckets and the provider caps' buckets of one engine."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._pairs: dict[Pair, TokenBucket] = {}
        self._caps: dict[str, TokenBucket] = {}

    def take(
        self,
        pair: Pair,
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

    def claim_limits(self, now: float, rates: RateTable) -> ThrottleLimits:
        """What the buckets allow one claim of the kinds of ``rates`` to take now (see
        :func:`skiplock.core.rules.throttle_limits`)."""
        if not rates:
            return ThrottleLimits()
        kinds = rates.limited_kinds()
        with self._lock:
            pairs = [(pair, b) for pair, b in self._pairs.items() if pair[0] in kinds]
            providers = {p for p, _ in rates.providers.values()}
            caps = {p: b for p, b in self._caps.items() if p in providers}
        return table_limits(rates, now, pairs, caps)


def _take(
    bucket: TokenBucket | None, limit: RateLimit | None, now: float
) -> tuple[TokenBucket | None, float]:
    if limit is None:
        return None, 0.0
    if bucket is None or bucket.limit != limit:
        bucket = TokenBucket(limit=limit, tokens=float(limit.burst), updated=now)
    return take(bucket, now)


class NodeSlots:
    """Jobs held per kind by all workers of one engine in this process (a node): node
    limits count these, so two workers of one engine never exceed a kind's node limit
    together.

    A held job counts from its claim (prefetched or running) until its worker lets it go.
    A claim in flight reserves the most it may take, so concurrent plans cannot both use
    the same free slot.
    """

    def __init__(self) -> None:
        self._lock = Lock()
        self._held: Counter[str] = Counter()

    def plan(
        self, planner: Callable[[Mapping[str, int]], ClaimRequest | None]
    ) -> ClaimRequest | None:
        """Plan a claim from the held counts and reserve its per-kind limits at once
        (release the reservation with :meth:`settle` when the claim returned)."""
        with self._lock:
            request = planner(dict(self._held))
            if request is not None:
                self._held.update(request.kind_limits)
            return request

    def settle(self, request: ClaimRequest, kinds: Iterable[str]) -> None:
        """Replace ``request``'s reservation with the kinds actually claimed."""
        with self._lock:
            self._held.subtract(request.kind_limits)
            self._held.update(kinds)
            self._drop_zeros()

    def release(self, kind: str) -> None:
        """One held job of ``kind`` is no longer held."""
        # Once per job: no scan of every kind (_drop_zeros), only this one's count.
        with self._lock:
            left = self._held[kind] - 1
            if left > 0:
                self._held[kind] = left
            else:
                self._held.pop(kind, None)

    def held(self, kind: str) -> int:
        """Jobs of ``kind`` held on this node now (reservations included)."""
        with self._lock:
            return self._held[kind]

    def _drop_zeros(self) -> None:
        for kind in [k for k, n in self._held.items() if n <= 0]:
            del self._held[kind]
