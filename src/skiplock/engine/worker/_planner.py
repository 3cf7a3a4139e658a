"""Planning one claim of a worker (one module for both flavours: no I/O).

The :class:`ClaimPlanner` turns the free room of a worker into a
:class:`~skiplock.core.ClaimRequest`: its kinds' node limits (shared by the engine's
workers in this process), cluster limits, token buckets and provider caps, and the
``max_attempts`` its processors set. It also settles what a claim took against the node
slots and reports the claimed jobs to the metrics port.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from skiplock.core.rules import kind_limits, plan_claim
from skiplock.core.store import ClaimedJobs, ThrottleLimits

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from skiplock.core import ClaimRequest
    from skiplock.core.rules import Pair
    from skiplock.core.store import RateTable
    from skiplock.ports import Clock, Metrics

    from .._controls import LimitsView
    from .._limits import NodeSlots, RateLimiter
    from ._scope import ClaimScope

logger = logging.getLogger("skiplock.worker")

#: A throttle decision (``Metrics.claim_throttled``): kind, tenant (None: a whole kind,
#: or no tenant) and the limit that had no room.
Decision = tuple[str, str | None, str]


def _decisions(pairs: Iterable[Pair], kinds: Mapping[str, str]) -> frozenset[Decision]:
    """The decisions of pairs left out by their bucket and of kinds left out whole."""
    found = {(kind, tenant, "rate_limit") for kind, tenant in pairs}
    found.update((kind, None, limit) for kind, limit in kinds.items())
    return frozenset(found)


class ClaimPace:
    """How many jobs a worker holds, and when it claims again.

    *When:* once the jobs still held would last only about :attr:`MARGIN` claim round
    trips at the rate jobs are finishing now. Claiming earlier than that spends a claim
    (a round trip and a commit, and server time for the index walk) on a few jobs;
    later, the slots run dry while the claim is in flight. The claim point never rises
    above a quarter of the buffer used up (``buffer - max(buffer // 4, 2)`` jobs still
    held), and without a measurement yet it is that: a worker whose jobs take long (few
    finish per round trip) claims rarely and in large batches, one with no-op jobs as
    before.

    *How many:* the buffer is ``prefetch``; with a ``ceiling`` above it (the default
    prefetch) it grows towards the ceiling to hold what finishes in :attr:`HOLD` claim
    round trips at the worker's rate, so fast jobs are claimed in large batches and a
    held job still waits only that long for its slot. Slow jobs keep the ``prefetch``
    buffer (what finishes in :attr:`HOLD` round trips is less than that).

    The rate "now" is read over the time since the last claim returned; the rate that
    sizes the buffer is a moving average of the rates between claim returns, so a few
    jobs finishing together do not inflate it. Round trips are a moving average of the
    claim calls. All on the real monotonic clock (the cost of I/O, not the engine's
    business time).
    """

    #: Held jobs should last this many claim round trips when the claim is sent.
    MARGIN = 3.0
    #: A buffer that may grow holds what finishes in this many claim round trips.
    HOLD = 32.0
    #: Weight of the newest sample in the moving averages (round trip, rate).
    WEIGHT = 0.25

    def __init__(
        self,
        prefetch: int,
        *,
        ceiling: int | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._now = now
        self._floor = prefetch
        self._ceiling = prefetch if ceiling is None else max(prefetch, ceiling)
        self._round_trip: float | None = None
        # Jobs handled per second between claim returns (moving average).
        self._rate: float | None = None
        # (monotonic time, jobs handled) when the last claim returned.
        self._mark: tuple[float, int] | None = None
        self._sent_at = 0.0

    def buffer(self) -> int:
        """How many claimed jobs to hold unstarted now (``prefetch`` up to the ceiling)."""
        floor = self._floor
        rate, round_trip = self._rate, self._round_trip
        if self._ceiling == floor or rate is None or round_trip is None:
            return floor
        return min(self._ceiling, max(floor, math.ceil(self.HOLD * rate * round_trip)))

    def due(self, held: int, handled: int) -> bool:
        """Whether to claim with ``held`` jobs held and ``handled`` handled so far."""
        return not held or held <= self.claim_point(handled)

    def claim_point(self, handled: int) -> int:
        """Claim once no more than this many jobs are held."""
        buffer = self.buffer()
        highest = buffer - max(buffer // 4, 2)
        if self._round_trip is None or self._mark is None:
            return highest
        since, handled_then = self._mark
        elapsed = self._now() - since
        if elapsed <= 0:
            return highest
        rate = (handled - handled_then) / elapsed
        need = math.ceil(self.MARGIN * rate * self._round_trip)
        return min(highest, max(2, need))

    def sent(self) -> None:
        """A claim is being sent."""
        self._sent_at = self._now()

    def returned(self, handled: int) -> None:
        """The claim sent last returned (also when it failed) with ``handled`` jobs
        handled so far."""
        now = self._now()
        took = now - self._sent_at
        if self._round_trip is None:
            self._round_trip = took
        else:
            self._round_trip += self.WEIGHT * (took - self._round_trip)
        if self._mark is not None:
            since, handled_then = self._mark
            if now > since:
                rate = (handled - handled_then) / (now - since)
                if self._rate is None:
                    self._rate = rate
                else:
                    self._rate += self.WEIGHT * (rate - self._rate)
        self._mark = (now, handled)


class ClaimPlanner:
    """Plans a worker's claims from its scope and the engine's shared limits.

    Rates come from ``limits.rates()`` (the one lookup of every rate a worker applies:
    the run-time limits over the policies', refreshed every ``Settings.controls_refresh``).
    With ``scope.cluster_rates`` they travel in the claim (:attr:`ClaimRequest.rates`)
    and the store applies them with its shared buckets; what a claim found throttled is
    then left out of the claims that follow until the store said a token is due
    (``retry_in``), so an idle throttled worker does not ask again before. Per process,
    the engine's own buckets (:class:`RateLimiter`) narrow each claim.

    Throttle decisions (``Metrics.claim_throttled``) are counted when a limit starts
    holding a pair or a kind back, not at every claim while it does: a pair counts again
    only after a claim found room for it.
    """

    def __init__(
        self,
        scope: ClaimScope,
        *,
        node_slots: NodeSlots,
        limiter: RateLimiter,
        limits: LimitsView,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self._scope = scope
        self._node_slots = node_slots
        self._limiter = limiter
        self._limits = limits
        self._clock = clock
        self._metrics = metrics
        policies = scope.policies
        # The declared limits; the concurrency limits set at run time (issue 45) win over
        # them at each plan (concurrency_limits).
        self._node_limits = {k: p.node_limit for k, p in policies.items() if p.node_limit}
        self._cluster_limits = {k: p.cluster_limit for k, p in policies.items() if p.cluster_limit}
        self._limits_built: tuple[int, dict[str, int], dict[str, int]] | None = None
        self._max_attempts = {k: p.retry.max_attempts for k, p in policies.items()}
        self._prefetch_limits = {
            k: p.prefetch_limit for k, p in policies.items() if p.prefetch_limit is not None
        }
        # What the store found throttled at the last claim (cluster-wide rates), left out
        # until the monotonic time given (the next token of an empty bucket).
        self._held_back: tuple[float, frozenset[Pair], frozenset[str], RateTable] | None = None
        #: Seconds until a throttled pair or provider has a token again (None: none), as
        #: of the last plan or claim.
        self.throttled_for: float | None = None
        # The decisions counted that still hold: found by the process's buckets at the
        # last plan, and by the store at the last claim; and what the last plan left out
        # as held back (not asked, so still held).
        self._planned: frozenset[Decision] = frozenset()
        self._found: frozenset[Decision] = frozenset()
        self._kept: frozenset[Decision] = frozenset()

    def concurrency_limits(self) -> tuple[dict[str, int], dict[str, int]]:
        """The node and cluster limits in force of the worker's kinds: the concurrency
        limits set at run time (the engine's last snapshot of the store's controls) over
        the kinds' declared ``node_limit`` and ``cluster_limit``. Built again only when
        the snapshot changed."""
        controls, version = self._limits.snapshot()
        built = self._limits_built
        if built is None or built[0] != version:
            kinds = self._scope.kinds
            node = kind_limits(self._node_limits, controls.concurrency, "node", kinds)
            cluster = kind_limits(self._cluster_limits, controls.concurrency, "cluster", kinds)
            built = self._limits_built = (version, node, cluster)
        return built[1], built[2]

    def prefetch_limits(
        self, rates: RateTable, cluster_limits: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        """How many jobs of each kind a claim may hold beyond those it starts at once: the
        kind's ``prefetch_limit``, else 0 for a kind limited across the cluster or by a
        rate (a node holding such jobs unstarted would hold back the others)."""
        if cluster_limits is None:
            cluster_limits = self.concurrency_limits()[1]
        limits = dict.fromkeys((*cluster_limits, *rates.limited_kinds()), 0)
        return limits | self._prefetch_limits

    def plan(self, free: int, start_now: int) -> ClaimRequest | None:
        """The claim for ``free`` places, ``start_now`` of them starting at once; None
        when nothing may be claimed. Takes node slots for it (see :meth:`claimed`).

        The paused kinds, tenants and pairs (the engine's last snapshot of the store's
        controls) are left out of the claim, like the throttled ones."""
        scope = self._scope
        controls, _ = self._limits.current()
        paused = controls.exclusions()
        rates = self._limits.rates()
        now = self._clock.monotonic()
        if scope.cluster_rates:
            throttle = ThrottleLimits()
            held_back = self._held_back
            self._kept = frozenset()
            # What the store held back stays out until its token is due, unless the
            # limits changed since (a raised limit applies at once).
            if held_back is not None and now < held_back[0] and held_back[3] == rates:
                deadline, pairs, kinds, _ = held_back
                throttle = ThrottleLimits(
                    excluded=pairs, excluded_kinds=kinds, retry_in=deadline - now
                )
                self._kept = _decisions(pairs, dict.fromkeys(kinds, "provider"))
            shared = rates
        else:
            throttle = self._limiter.claim_limits(now, rates)
            self._planned = self._count_throttled(
                self._planned,
                _decisions(throttle.excluded, dict.fromkeys(throttle.excluded_kinds, "provider")),
            )
            shared = None
        self.throttled_for = throttle.retry_in
        node_limits, cluster_limits = self.concurrency_limits()
        prefetch_limits = self.prefetch_limits(rates, cluster_limits)

        def planner(held: Mapping[str, int]) -> ClaimRequest | None:
            return plan_claim(
                worker_id=scope.worker_id,
                free_slots=free,
                batch_size=scope.batch_size,
                running=held,
                node_limits=node_limits,
                cluster_limits=cluster_limits,
                kinds=scope.kinds,
                tenants=scope.tenants,
                excluded=throttle.excluded | paused.pairs,
                excluded_kinds=throttle.excluded_kinds | paused.kinds,
                excluded_tenants=paused.tenants,
                pair_limits=throttle.pair_limits,
                kind_caps=throttle.kind_caps,
                start_now=start_now,
                max_attempts=self._max_attempts,
                prefetch_limits=prefetch_limits,
                rates=shared,
                with_errors=scope.with_errors,
            )

        return self._node_slots.plan(planner)

    def claimed(self, plan: ClaimRequest, jobs: ClaimedJobs) -> None:
        """What ``plan`` took: give back the node slots it did not use, report the jobs
        (a failing metrics sink never loses them)."""
        self._node_slots.settle(plan, (job.kind for job in jobs))
        self._store_throttled(plan, jobs)
        for job in jobs:
            latency = 0.0
            if job.claimed_at is not None:
                latency = max(0.0, (job.claimed_at - job.available_at).total_seconds())
            try:
                self._metrics.job_claimed(job.kind, job.tenant, latency)
            except Exception:
                logger.exception("worker %s: metrics failed", self._scope.worker_id)

    def _store_throttled(self, plan: ClaimRequest, claimed: ClaimedJobs) -> None:
        """What the store held back in the claim of ``plan``: counted, and (cluster-wide
        rates) left out of the next claims until a token is due."""
        self._found = self._count_throttled(
            self._found, _decisions(claimed.throttled, claimed.throttled_kinds), self._kept
        )
        if not self._scope.cluster_rates or not plan.rates:
            return
        retry_in = claimed.retry_in
        if retry_in is None:
            self._held_back = None
            self.throttled_for = None
            return
        rated = {k for k in claimed.throttled_kinds if claimed.throttled_kinds[k] == "provider"}
        self._held_back = (
            self._clock.monotonic() + retry_in,
            frozenset(claimed.throttled),
            frozenset(rated),
            self._limits.rates(),
        )
        self.throttled_for = retry_in

    def _count_throttled(
        self,
        before: frozenset[Decision],
        found: frozenset[Decision],
        kept: frozenset[Decision] = frozenset(),
    ) -> frozenset[Decision]:
        """Count the decisions of ``found`` not already held in ``before`` (a failing
        metrics sink changes nothing); return those held now: ``found``, and those of
        ``before`` the claim did not ask about (``kept``: left out as held back)."""
        try:
            for kind, tenant, limit in sorted(found - before, key=str):
                self._metrics.claim_throttled(kind, tenant, limit)
        except Exception:
            logger.exception("worker %s: metrics failed", self._scope.worker_id)
        return found | (before & kept)
