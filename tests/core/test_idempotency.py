"""First occurrence of each idempotency key within a batch."""

from __future__ import annotations

from skiplock.core import EnqueueRequest, first_occurrences


def _req(key: str | None) -> EnqueueRequest:
    return EnqueueRequest(kind="k", idempotency_key=key)


def test_first_occurrences_empty() -> None:
    assert first_occurrences([]) == []


def test_first_occurrences_without_keys_map_to_themselves() -> None:
    assert first_occurrences([_req(None), _req(None), _req(None)]) == [0, 1, 2]


def test_first_occurrences_duplicates_point_to_first() -> None:
    batch = [_req("a"), _req(None), _req("b"), _req("a"), _req("b"), _req(None), _req("a")]
    assert first_occurrences(batch) == [0, 1, 2, 0, 2, 5, 0]


def test_first_occurrences_keys_are_case_sensitive() -> None:
    assert first_occurrences([_req("A"), _req("a")]) == [0, 1]


def test_first_occurrences_key_matches_regardless_of_other_fields() -> None:
    batch = [
        EnqueueRequest(kind="x", payload=1, idempotency_key="k"),
        EnqueueRequest(kind="y", payload=2, idempotency_key="k"),
    ]
    assert first_occurrences(batch) == [0, 0]
