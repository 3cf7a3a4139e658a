"""Idempotency rules (R16)."""

from __future__ import annotations

from collections.abc import Sequence

from ._types import EnqueueRequest


def first_occurrences(requests: Sequence[EnqueueRequest]) -> list[int]:
    """For each request, the index of the first request in the batch with the same key.

    Requests without a key map to themselves. Stores create only the first of a batch's
    duplicates and return its id for the others.
    """
    raise NotImplementedError
