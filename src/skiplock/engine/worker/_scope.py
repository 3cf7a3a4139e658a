"""What one worker claims, and the checks of a worker's configuration."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import uuid
from collections.abc import Iterable, Mapping

import attrs

from skiplock.core import KindPolicy, ValidationError

from .._registry import check_kind


def default_worker_id() -> str:
    """``<host>/<pid>/<uuid4 hex>`` (J1)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex}"


@attrs.frozen
class ClaimScope:
    """What one worker claims: kinds, tenants and the policies that bound its claims.

    ``prefetch`` is the smallest size of its buffer of held jobs, ``prefetch_ceiling``
    the largest (it grows between the two while jobs finish fast;
    :meth:`Settings.prefetch_ceiling`).
    ``unwritten_limit``: most jobs the worker holds whose outcome is not written yet
    (running, prefetched, or waiting for the completer; :meth:`Settings.unwritten_limit`).
    """

    worker_id: str
    concurrency: int
    prefetch: int
    prefetch_ceiling: int
    batch_size: int
    unwritten_limit: int
    kinds: frozenset[str] | None
    tenants: frozenset[str] | None
    policies: Mapping[str, KindPolicy]
    #: Rates are the store's (``Settings.rate_limit_scope == "cluster"``): claims carry
    #: them (``ClaimRequest.rates``); else the engine's buckets in this process apply them.
    cluster_rates: bool = True
    #: Claims return each job's earlier errors (``ClaimRequest.with_errors``): the
    #: engine's processors read them from ``ctx.job.errors``.
    with_errors: bool = False


def claim_kinds(
    kinds: Iterable[str] | None, registered: frozenset[str], all_kinds: bool
) -> frozenset[str] | None:
    """The kinds a worker claims (None: every kind); see :class:`AsyncWorker`."""
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        wanted = frozenset(check_kind(k) for k in names)
        missing = sorted(wanted - registered)
        if missing and not all_kinds:
            raise ValidationError(
                f"no processor registered for kinds {missing}; register them, or pass "
                "all_kinds=True to claim and bury them"
            )
        return wanted
    if all_kinds:
        return None
    if not registered:
        raise ValidationError(
            "this engine has no processors: register some, or pass all_kinds=True"
        )
    return registered


def check_tenants(tenants: Iterable[str] | None) -> frozenset[str] | None:
    """The tenants a worker claims (None: every tenant)."""
    if tenants is None:
        return None
    given: list[object] = [tenants] if isinstance(tenants, str) else list(tenants)
    if not given or not all(isinstance(t, str) and t for t in given):
        raise ValidationError(f"tenants must be non-empty strings, got {tenants!r}")
    return frozenset(str(t) for t in given)


def skiplock_version() -> str | None:
    """The installed skiplock's version, as a worker registers it (None: not installed
    as a distribution, e.g. run from a source tree)."""
    try:
        return importlib.metadata.version("skiplock")
    except importlib.metadata.PackageNotFoundError:
        return None
