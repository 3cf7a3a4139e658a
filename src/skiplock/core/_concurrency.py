"""Concurrency limits set at run time (issue 45): an operator's override of a kind's
``node_limit`` or ``cluster_limit``, or of a concurrency key's limit. Pure values and the
one rule of which limit is in force (docs/controls.md, "Concurrency at run time").

A :class:`ConcurrencyLimit` names a kind (``scope`` ``"node"``: jobs of the kind one
worker process holds at once; ``"cluster"``: jobs of the kind running across the
cluster) or a concurrency key (always ``"cluster"``: a key's limit holds across kinds
and workers). It wins over what the code declares (the kind's policy, the jobs'
``concurrency_limit``) until it is cleared.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ._errors import ValidationError
from ._validation import INT4_RANGE, check_actor, check_int

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

ConcurrencyScope = Literal["node", "cluster"]

#: The scopes a concurrency limit may have.
CONCURRENCY_SCOPES: tuple[ConcurrencyScope, ...] = ("node", "cluster")

_MAX_NAME = 255


def _name(what: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_NAME:
        raise ValidationError(
            f"{what} must be a non-blank string of at most {_MAX_NAME} characters, got {value!r}"
        )
    return value


def concurrency_scope(
    kind: object, key: object, scope: object
) -> tuple[str | None, str | None, ConcurrencyScope]:
    """A checked ``(kind, key, scope)`` of a concurrency limit: a kind (node or cluster)
    or a concurrency key (cluster only), not both."""
    checked_kind, checked_key = _name("kind", kind), _name("key", key)
    if (checked_kind is None) == (checked_key is None):
        raise ValidationError("a concurrency limit names a kind or a concurrency key (one)")
    if scope not in CONCURRENCY_SCOPES:
        raise ValidationError(f"scope must be 'node' or 'cluster', got {scope!r}")
    if checked_key is not None and scope != "cluster":
        raise ValidationError("a concurrency key's limit is cluster-wide (scope 'cluster')")
    return checked_kind, checked_key, scope


def check_concurrency_limit(limit: object) -> int:
    """A concurrency limit: an int of at least 1."""
    return check_int("limit", limit, minimum=1, maximum=INT4_RANGE[1])


@attrs.frozen
class ConcurrencyLimit:
    """At most ``limit`` jobs of ``kind`` (per worker process with ``scope="node"``,
    across the cluster with ``"cluster"``), or of concurrency ``key`` (cluster-wide),
    run at once: set at run time, over the declared limit. ``actor`` and ``updated_at``
    (the store's time) say who set it and when."""

    limit: int
    kind: str | None = None
    key: str | None = None
    scope: ConcurrencyScope = "cluster"
    actor: str | None = None
    updated_at: datetime | None = None

    def __attrs_post_init__(self) -> None:
        concurrency_scope(self.kind, self.key, self.scope)
        check_concurrency_limit(self.limit)
        if self.actor is not None:
            check_actor("actor", self.actor)

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the CLI's ``--json``, the REST API)."""
        return {
            "kind": self.kind,
            "key": self.key,
            "scope": self.scope,
            "limit": self.limit,
            "actor": self.actor,
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }


def concurrency_details(limit: ConcurrencyLimit) -> dict[str, Any]:
    """The details of a ``concurrency_set`` or ``concurrency_cleared`` audit event."""
    return {"key": limit.key, "scope": limit.scope, "limit": limit.limit}


def kind_limits(
    declared: Mapping[str, int],
    overrides: Iterable[ConcurrencyLimit],
    scope: ConcurrencyScope,
    kinds: Iterable[str] | None = None,
) -> dict[str, int]:
    """The ``scope`` limits in force per kind: a stored override of the kind, else the
    declared one (``declared``: the kinds' ``node_limit`` or ``cluster_limit``). With
    ``kinds``, only those kinds (a worker's)."""
    result = dict(declared)
    for stored in overrides:
        if stored.kind is not None and stored.scope == scope:
            result[stored.kind] = stored.limit
    if kinds is not None:
        wanted = set(kinds)
        result = {k: n for k, n in result.items() if k in wanted}
    return result


def key_limit(
    overrides: Iterable[ConcurrencyLimit], key: str | None, declared: int | None
) -> int | None:
    """The limit in force of concurrency ``key``: its stored override, else ``declared``
    (the job's ``concurrency_limit``; 1 when the job has a key without one)."""
    if key is None:
        return declared
    for stored in overrides:
        if stored.key == key:
            return stored.limit
    return 1 if declared is None else declared
