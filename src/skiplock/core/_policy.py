"""Per-kind policy and its resolution: explicit config > processor default > global."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TypeVar, cast

import attrs

from ._bucket import RateLimit
from ._errors import ValidationError
from ._retry import RetryPolicy

_T = TypeVar("_T")


@attrs.frozen
class KindPolicy:
    """Fully resolved policy of one kind."""

    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    timeout: float | None = None  # seconds; None = no timeout
    stale_ttl: timedelta = timedelta(minutes=15)
    node_limit: int | None = None  # per worker process
    cluster_limit: int | None = None  # across all workers
    rate_limit: RateLimit | None = None  # per (tenant, kind)
    # Connection mode (R10), opt-in: run inside the job's transaction, or with an
    # autocommit connection; neither (the default) acquires no connection for the job.
    transactional: bool = False
    autocommit: bool = False

    def __attrs_post_init__(self) -> None:
        _validate_overrides(
            PolicyOverrides(
                timeout=self.timeout,
                stale_ttl=self.stale_ttl,
                node_limit=self.node_limit,
                cluster_limit=self.cluster_limit,
                transactional=self.transactional,
                autocommit=self.autocommit,
            )
        )


def _positive_int(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{name} must be a positive int, got {value!r}")


def _validate_overrides(o: PolicyOverrides) -> None:
    _positive_int("max_attempts", o.max_attempts)
    _positive_int("node_limit", o.node_limit)
    _positive_int("cluster_limit", o.cluster_limit)
    if o.timeout is not None and not (math.isfinite(o.timeout) and o.timeout > 0):
        raise ValidationError(f"timeout must be > 0 seconds, got {o.timeout!r}")
    if o.stale_ttl is not None and o.stale_ttl <= timedelta(0):
        raise ValidationError(f"stale_ttl must be > 0, got {o.stale_ttl}")
    if o.backoff_base is not None and o.backoff_base < timedelta(0):
        raise ValidationError(f"backoff_base must be >= 0, got {o.backoff_base}")
    if o.backoff_cap is not None and o.backoff_cap < timedelta(0):
        raise ValidationError(f"backoff_cap must be >= 0, got {o.backoff_cap}")
    if o.backoff_factor is not None and not (
        math.isfinite(o.backoff_factor) and o.backoff_factor >= 1
    ):
        raise ValidationError(f"backoff_factor must be >= 1, got {o.backoff_factor!r}")
    if o.backoff_jitter is not None and not 0 <= o.backoff_jitter <= 1:
        raise ValidationError(f"backoff_jitter must be within [0, 1], got {o.backoff_jitter!r}")
    for name in ("transactional", "autocommit"):
        flag: object = getattr(o, name)
        if flag is not None and not isinstance(flag, bool):
            raise ValidationError(f"{name} must be a bool, got {flag!r}")
    if o.transactional and o.autocommit:
        raise ValidationError(
            "transactional and autocommit are mutually exclusive: a job runs either inside "
            "its transaction or with an autocommit connection (set one of them to False)"
        )


@attrs.frozen
class PolicyOverrides:
    """A partial policy: ``None`` means "not set at this level".

    Values are checked at construction (positive limits, timeout > 0, sane backoff, not
    both ``transactional`` and ``autocommit``); whether base <= cap holds, and whether the
    merged connection mode is consistent, is checked once the levels are merged.
    """

    max_attempts: int | None = None
    backoff_base: timedelta | None = None
    backoff_factor: float | None = None
    backoff_cap: timedelta | None = None
    backoff_jitter: float | None = None
    timeout: float | None = None
    stale_ttl: timedelta | None = None
    node_limit: int | None = None
    cluster_limit: int | None = None
    rate_limit: RateLimit | None = None
    transactional: bool | None = None
    autocommit: bool | None = None

    def __attrs_post_init__(self) -> None:
        _validate_overrides(self)


def _pick(levels: tuple[PolicyOverrides, ...], name: str, fallback: _T) -> _T:
    for level in levels:
        value = getattr(level, name)
        if value is not None:
            return cast("_T", value)
    return fallback


def resolve_policy(
    explicit: PolicyOverrides | None, processor: PolicyOverrides | None, default: KindPolicy
) -> KindPolicy:
    """Merge field by field: the first level that sets a field wins.

    Raises :class:`~skiplock.core.ValidationError` if the merged policy is inconsistent
    (e.g. a backoff base above the cap, or ``transactional`` and ``autocommit`` both True
    because different levels set one each).
    """
    levels = tuple(x for x in (explicit, processor) if x is not None)
    d = default.retry
    retry = RetryPolicy(
        max_attempts=_pick(levels, "max_attempts", d.max_attempts),
        base=_pick(levels, "backoff_base", d.base),
        factor=_pick(levels, "backoff_factor", d.factor),
        cap=_pick(levels, "backoff_cap", d.cap),
        jitter=_pick(levels, "backoff_jitter", d.jitter),
    )
    return KindPolicy(
        retry=retry,
        timeout=_pick(levels, "timeout", default.timeout),
        stale_ttl=_pick(levels, "stale_ttl", default.stale_ttl),
        node_limit=_pick(levels, "node_limit", default.node_limit),
        cluster_limit=_pick(levels, "cluster_limit", default.cluster_limit),
        rate_limit=_pick(levels, "rate_limit", default.rate_limit),
        transactional=_pick(levels, "transactional", default.transactional),
        autocommit=_pick(levels, "autocommit", default.autocommit),
    )
