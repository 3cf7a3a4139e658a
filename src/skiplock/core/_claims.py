"""Core value types of a worker's side of a store: what it claims and the outcomes it
reports for a claimed job. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TypeAlias

import attrs

from ._bucket import RateTable
from ._types import JSON, Job, Lease

# ---- outcomes a worker reports for a claimed job -------------------------------------


@attrs.frozen
class Succeeded:
    """The processor returned normally; ``result`` is its return value as JSON-ready data
    (None: nothing is stored).

    ``result_json`` is ``result`` as :func:`~._validation.encode_result` encoded it, when the
    caller already did (the engine does, to validate it): stores then write this text
    instead of encoding again. Derived from ``result``, so not part of equality.
    """

    result: JSON = None
    result_json: str | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def final(self) -> bool:
        """True: no retry follows a success (see :attr:`Retry.final`)."""
        return True


@attrs.frozen
class Retry:
    """Failed attempt; run again after ``delay`` (counted from the store's clock)."""

    delay: timedelta
    error: str

    @property
    def final(self) -> bool:
        """Whether the job is finished once this outcome is written (no retry follows):
        False here and for :class:`Release`, True for :class:`Succeeded` and
        :class:`Bury`. The failure decision (core's ``decide_failure``) chose the outcome,
        so whoever reads it (the worker, a framework integration) needs no rule of its
        own."""
        return False


@attrs.frozen
class Bury:
    """Give up: move to ``dead`` with ``error``."""

    error: str

    @property
    def final(self) -> bool:
        """True: the job is dead, no retry follows (see :attr:`Retry.final`)."""
        return True


@attrs.frozen
class Release:
    """Back to pending without using an attempt (throttled, shutdown), after ``delay``.

    ``refund`` is True for a job that started: its attempt is given back (paid first if
    nothing paid for it yet). It is False for a held (prefetched) job that never started:
    its attempts stay as they are.
    """

    delay: timedelta = timedelta(0)
    error: str | None = None
    refund: bool = True

    @property
    def final(self) -> bool:
        """False: the job runs again (see :attr:`Retry.final`)."""
        return False


Outcome: TypeAlias = Succeeded | Retry | Bury | Release


@attrs.frozen
class Completion:
    """An outcome for a claimed job, fenced by its lease."""

    lease: Lease
    outcome: Outcome


# ---- claiming ------------------------------------------------------------------------


@attrs.frozen
class ClaimRequest:
    """What a worker asks a store for, as planned by :func:`~skiplock.core._capacity.plan_claim`.

    - ``limit``: at most this many jobs in total.
    - ``kinds``: only these kinds (``None``: any kind).
    - ``tenants``: only these tenants (``None``: any tenant, including none).
    - ``kind_limits``: at most this many jobs of the kind in this claim (per-node slots).
    - ``cluster_limits``: running jobs of the kind across the cluster, including the ones
      claimed now, must never exceed this (strict under races).
    - ``excluded``: ``(kind, tenant)`` pairs not to claim now (empty token buckets).
    - ``excluded_kinds``: kinds not to claim now (full per-node slots, empty global caps,
      paused kinds).
    - ``excluded_tenants``: tenants whose jobs not to claim now, of any kind (paused
      tenants); jobs without a tenant are never excluded by it.
    - ``pair_limits``: at most this many jobs of the ``(kind, tenant)`` pair in this claim
      (what its token bucket can start now); kind limits still hold for the kind as a
      whole.
    - ``start_now``: how many of the claimed jobs, in claim order, start at once and use
      their attempt at claim (``attempts += 1``). The others are *held* (prefetched):
      running under the worker with ``claims += 1`` but ``attempts`` unchanged until
      :meth:`~skiplock.ports.AsyncJobStore.start` — so a held job that never starts costs
      no attempt when its worker dies. ``None``: every claimed job starts at once. A
      suspect (:attr:`Job.suspect`) starts alone: if one is among the first
      ``start_now``, only the first such suspect is charged and every other claimed job
      is held (:func:`~skiplock.core.charged_positions` is the rule).
    - ``max_attempts``: the claiming worker's ``max_attempts`` per kind. A claimed job
      whose ``max_attempts`` was not set explicitly at enqueue takes this value (the
      policy of the processor that runs it decides, not the enqueuer's default).
    - ``rates``: cluster-wide rate limits (a token bucket per (kind, tenant) pair and per
      provider, shared by every claimer through the store): the claim takes no job its
      buckets cannot pay for now and draws one token per job it takes
      (:mod:`skiplock.core._rates` has the rules). Empty: no rate is the store's business.
    - ``with_errors``: return each claimed job with its :attr:`Job.errors` (its earlier
      attempts' failures: a processor that reports them, the Django integration's
      ``TaskResult.errors``, needs no read of its own). Off, a claim reads no more than
      it needs and its jobs' ``errors`` are empty.
    """

    worker_id: str
    limit: int
    kinds: frozenset[str] | None = None
    tenants: frozenset[str] | None = None
    kind_limits: Mapping[str, int] = attrs.field(factory=dict)
    cluster_limits: Mapping[str, int] = attrs.field(factory=dict)
    excluded: frozenset[tuple[str, str | None]] = frozenset()
    excluded_kinds: frozenset[str] = frozenset()
    excluded_tenants: frozenset[str] = frozenset()
    pair_limits: Mapping[tuple[str, str | None], int] = attrs.field(factory=dict)
    start_now: int | None = None
    max_attempts: Mapping[str, int] = attrs.field(factory=dict)
    rates: RateTable = attrs.field(factory=RateTable)
    with_errors: bool = False


class ClaimedJobs(list[Job]):
    """The jobs one claim took (claim order), what it charged, and what limits held back.

    - ``charged``: the ids of the jobs this claim started and paid an attempt for
      (``attempts += 1``, started mark set: the returned job's ``attempts`` is that
      attempt); every other job it returned is held until ``start``. The store says what
      it did (core's :func:`~skiplock.core.charged_positions` is how it decides), so the
      worker reads it instead of deciding again.
    - ``throttled``: (kind, tenant) pairs left out because their token bucket was empty.
    - ``throttled_kinds``: kinds left out whole, with why: ``"provider"`` (the
      provider's bucket was empty) or ``"cluster_limit"`` (as many running as allowed).
    - ``retry_in``: seconds until the next empty bucket has a token (None: none empty).

    A store fills these for the limits it applies itself (cluster limits, cluster-wide
    rates); a claim without them returns empty ones.
    """

    __slots__ = ("charged", "retry_in", "throttled", "throttled_kinds")

    def __init__(
        self,
        jobs: Iterable[Job] = (),
        *,
        charged: Iterable[int] = (),
        throttled: frozenset[tuple[str, str | None]] = frozenset(),
        throttled_kinds: Mapping[str, str] | None = None,
        retry_in: float | None = None,
    ) -> None:
        super().__init__(jobs)
        self.charged = frozenset(charged)
        self.throttled = throttled
        self.throttled_kinds: Mapping[str, str] = throttled_kinds or {}
        self.retry_in = retry_in

    def held(self) -> list[Job]:
        """The jobs this claim held (not charged), in claim order."""
        return [job for job in self if job.id not in self.charged]

    def __repr__(self) -> str:
        return (
            f"ClaimedJobs({list.__repr__(self)}, charged={sorted(self.charged)!r}, "
            f"throttled={set(self.throttled)!r}, "
            f"throttled_kinds={dict(self.throttled_kinds)!r}, retry_in={self.retry_in!r})"
        )


@attrs.frozen
class NextDue:
    """When the next pending job a worker may claim falls due, as a store saw it.

    ``at``: the earliest ``available_at`` after ``now`` among the pending jobs of the
    worker's kinds and tenants; or, when a bounded store query could not look further, a
    time before which none of them is due (the worker asks again then). ``now``: the
    store's clock when it looked. Both on the store's clock, like every ``available_at``.
    """

    at: datetime
    now: datetime

    @property
    def seconds(self) -> float:
        """Seconds from the store's ``now`` to ``at`` (never negative)."""
        return max(0.0, (self.at - self.now).total_seconds())
