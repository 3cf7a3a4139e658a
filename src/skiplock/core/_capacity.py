"""Worker capacity planning: how many jobs of which kinds to claim now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._types import ClaimRequest

if TYPE_CHECKING:
    from collections.abc import Mapping


def plan_claim(
    *,
    worker_id: str,
    free_slots: int,
    batch_size: int,
    running: Mapping[str, int],
    node_limits: Mapping[str, int],
    cluster_limits: Mapping[str, int],
    kinds: frozenset[str] | None,
    tenants: frozenset[str] | None,
    excluded: frozenset[tuple[str, str | None]] = frozenset(),
    excluded_kinds: frozenset[str] = frozenset(),
) -> ClaimRequest | None:
    """Plan one claim; ``None`` when nothing may be claimed (no free slot, every kind full).

    ``running`` counts this node's running jobs per kind; kinds at their node limit are
    excluded, the others capped at what is left. Kinds that are already excluded (e.g. an
    empty global cap) stay excluded. Cluster limits pass through for the kinds that may
    still be claimed; the store enforces them strictly.
    """
    limit = min(free_slots, batch_size)
    if limit <= 0:
        return None
    excluded_all = set(excluded_kinds)
    kind_limits: dict[str, int] = {}
    for kind, node_limit in node_limits.items():
        if kind in excluded_all:
            continue
        left = node_limit - running.get(kind, 0)
        if left <= 0:
            excluded_all.add(kind)
        else:
            kind_limits[kind] = min(left, limit)
    if kinds is not None and kinds <= excluded_all:
        return None
    return ClaimRequest(
        worker_id=worker_id,
        limit=limit,
        kinds=kinds,
        tenants=tenants,
        kind_limits=kind_limits,
        cluster_limits={k: v for k, v in cluster_limits.items() if k not in excluded_all},
        excluded=excluded,
        excluded_kinds=frozenset(excluded_all),
    )
