"""Idempotency rules (R16)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._types import EnqueueRequest


def first_occurrences(requests: Sequence[EnqueueRequest]) -> list[int]:
    """For each request, the index of the first request in the batch with the same key.

    Requests without a key map to themselves. Stores create only the first of a batch's
    duplicates and return its id for the others.
    """
    first: dict[str, int] = {}
    return [
        i if r.idempotency_key is None else first.setdefault(r.idempotency_key, i)
        for i, r in enumerate(requests)
    ]
