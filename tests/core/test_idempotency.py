"""First occurrence of each idempotency key within a batch, in its scope."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from skiplock.core import EnqueueRequest, ValidationError, first_occurrences
from skiplock.core._idempotency import IdempotencyScope, job_scoped_key, scope_of, scoped_key
from skiplock.core._lifecycle import new_job
from skiplock.core._options import check_idempotency_policy, validate_request


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


# ---- scopes -----------------------------------------------------------------------------


def _scoped(key: str, tenant: str | None, scope: IdempotencyScope = "tenant") -> EnqueueRequest:
    return EnqueueRequest(kind="k", idempotency_key=key, tenant=tenant, idempotency_scope=scope)


def test_a_tenant_scoped_key_is_unique_per_tenant() -> None:
    batch = [_scoped("k", "a"), _scoped("k", "b"), _scoped("k", "a"), _scoped("k", "b")]
    assert first_occurrences(batch) == [0, 1, 0, 1]


def test_the_global_scope_is_apart_from_the_tenants() -> None:
    batch = [_scoped("k", "a"), _scoped("k", "a", "global"), _scoped("k", "b", "global")]
    assert first_occurrences(batch) == [0, 1, 1]


def test_a_tenant_scoped_key_without_a_tenant_is_global() -> None:
    assert scoped_key(_scoped("k", None)) == ("k", None) == scoped_key(_req("k"))
    assert first_occurrences([_scoped("k", None), _req("k")]) == [0, 0]


def test_scopes_as_stores_keep_them() -> None:
    assert [scope_of("a", "tenant"), scope_of("a", "global"), scope_of(None, "tenant")] == [
        "a",
        None,
        None,
    ]
    assert scoped_key(_req(None)) is None
    job = new_job(_scoped("k", "a"), job_id=1, payload="null", now=datetime.now(UTC))
    assert (job.idempotency_scope, job_scoped_key(job)) == ("tenant", ("k", "a"))
    job = new_job(_scoped("k", None), job_id=2, payload="null", now=datetime.now(UTC))
    assert (job.idempotency_scope, job_scoped_key(job)) == ("global", ("k", None))


def test_the_policy_words_are_checked() -> None:
    check_idempotency_policy("tenant", "replace_pending")
    with pytest.raises(ValidationError, match="idempotency_scope"):
        check_idempotency_policy("tenants", "ignore")
    with pytest.raises(ValidationError, match="idempotency_conflict"):
        validate_request(EnqueueRequest(kind="k", idempotency_conflict="replace"))  # type: ignore[arg-type]
