"""Worker capacity planning: how many jobs of which kinds to claim now."""

from __future__ import annotations

from collections.abc import Mapping

from ._types import ClaimRequest


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
    excluded, the others capped at what is left.
    """
    raise NotImplementedError
