"""Per-kind policy and its resolution: explicit config > processor default > global."""

from __future__ import annotations

from datetime import timedelta

import attrs

from ._bucket import RateLimit
from ._retry import RetryPolicy


@attrs.frozen
class KindPolicy:
    """Fully resolved policy of one kind."""

    retry: RetryPolicy = RetryPolicy()
    timeout: float | None = None  # seconds; None = no timeout
    stale_ttl: timedelta = timedelta(minutes=15)
    node_limit: int | None = None  # per worker process
    cluster_limit: int | None = None  # across all workers
    rate_limit: RateLimit | None = None  # per (tenant, kind)
    transactional: bool = True  # may the processor run inside the job's transaction


@attrs.frozen
class PolicyOverrides:
    """A partial policy: ``None`` means "not set at this level"."""

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


def resolve_policy(
    explicit: PolicyOverrides | None, processor: PolicyOverrides | None, default: KindPolicy
) -> KindPolicy:
    """Merge field by field: the first level that sets a field wins."""
    raise NotImplementedError
