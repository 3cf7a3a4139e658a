"""Idempotency rules (R16): a key's scope, what a conflict does, duplicates in a batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from ._types import (
    IDEMPOTENCY_CONFLICTS,
    IDEMPOTENCY_SCOPES,
    IdempotencyConflict,
    IdempotencyScope,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._types import EnqueueRequest, Job

__all__ = [
    "IDEMPOTENCY_CONFLICTS",
    "IDEMPOTENCY_SCOPES",
    "IdempotencyConflict",
    "IdempotencyScope",
    "ScopedKey",
    "first_occurrences",
    "job_scoped_key",
    "key_scope",
    "scope_of",
    "scoped_key",
]

#: A key as stores index it: ``(key, scope)``, the scope being the tenant for a
#: tenant-scoped key and None for a global one.
ScopedKey: TypeAlias = tuple[str, str | None]


def scope_of(tenant: str | None, scope: str) -> str | None:
    """The scope a key is unique in, as stores index it: the tenant with ``tenant`` scope,
    else None (global; also a tenant-scoped key of a job without a tenant)."""
    return tenant if scope == "tenant" else None


def key_scope(request: EnqueueRequest) -> str | None:
    """The scope of a request's key (:func:`scope_of`)."""
    return scope_of(request.tenant, request.idempotency_scope)


def scoped_key(request: EnqueueRequest) -> ScopedKey | None:
    """The request's key with its scope, or None when it has no key."""
    key = request.idempotency_key
    return None if key is None else (key, key_scope(request))


def job_scoped_key(job: Job) -> ScopedKey | None:
    """A job's key with its scope (as :func:`scoped_key` gave it), or None."""
    key = job.idempotency_key
    if key is None:
        return None
    return key, scope_of(job.tenant, job.idempotency_scope)


def first_occurrences(requests: Sequence[EnqueueRequest]) -> list[int]:
    """For each request, the index of the first request in the batch with the same key
    in the same scope.

    Requests without a key map to themselves. Stores create only the first of a batch's
    duplicates and return its id for the others (also with ``replace_pending``: within
    one batch the first request of a key counts).
    """
    first: dict[ScopedKey, int] = {}
    found: list[int] = []
    for i, r in enumerate(requests):
        key = scoped_key(r)
        found.append(i if key is None else first.setdefault(key, i))
    return found
