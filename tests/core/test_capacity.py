"""Claim planning from free slots, per-node and cluster limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock.core import ClaimRequest
from skiplock.core._capacity import plan_claim

if TYPE_CHECKING:
    from collections.abc import Mapping


def _plan(
    *,
    free_slots: int = 4,
    batch_size: int = 10,
    running: Mapping[str, int] | None = None,
    node_limits: Mapping[str, int] | None = None,
    cluster_limits: Mapping[str, int] | None = None,
    kinds: frozenset[str] | None = None,
    tenants: frozenset[str] | None = None,
    excluded: frozenset[tuple[str, str | None]] = frozenset(),
    excluded_kinds: frozenset[str] = frozenset(),
) -> ClaimRequest | None:
    return plan_claim(
        worker_id="w1",
        free_slots=free_slots,
        batch_size=batch_size,
        running=running or {},
        node_limits=node_limits or {},
        cluster_limits=cluster_limits or {},
        kinds=kinds,
        tenants=tenants,
        excluded=excluded,
        excluded_kinds=excluded_kinds,
    )


@pytest.mark.parametrize("free_slots", [0, -1])
def test_plan_claim_no_free_slot(free_slots: int) -> None:
    assert _plan(free_slots=free_slots) is None


def test_plan_claim_zero_batch_size() -> None:
    assert _plan(batch_size=0) is None


@pytest.mark.parametrize(("free", "batch", "limit"), [(4, 10, 4), (10, 3, 3), (5, 5, 5)])
def test_plan_claim_limit_is_min_of_slots_and_batch(free: int, batch: int, limit: int) -> None:
    assert _plan(free_slots=free, batch_size=batch) == ClaimRequest(worker_id="w1", limit=limit)


def test_plan_claim_kind_limits_what_is_left() -> None:
    plan = _plan(
        free_slots=4,
        running={"a": 1, "b": 0},
        node_limits={"a": 3, "b": 10, "c": 2},
    )
    assert plan is not None
    # b has 10 left but the whole claim is capped at 4.
    assert plan.kind_limits == {"a": 2, "b": 4, "c": 2}
    assert plan.excluded_kinds == frozenset()


def test_plan_claim_full_kind_excluded() -> None:
    plan = _plan(running={"a": 3, "b": 5}, node_limits={"a": 3, "b": 2})
    assert plan is not None
    assert plan.excluded_kinds == {"a", "b"}
    assert plan.kind_limits == {}


def test_plan_claim_running_without_limit_ignored() -> None:
    plan = _plan(running={"free": 100})
    assert plan == ClaimRequest(worker_id="w1", limit=4)


def test_plan_claim_restricted_worker_all_kinds_full() -> None:
    assert (
        _plan(kinds=frozenset({"a", "b"}), running={"a": 1, "b": 1}, node_limits={"a": 1, "b": 1})
        is None
    )


def test_plan_claim_restricted_worker_some_kinds_left() -> None:
    plan = _plan(kinds=frozenset({"a", "b"}), running={"a": 1}, node_limits={"a": 1, "b": 1})
    assert plan is not None
    assert plan.kinds == frozenset({"a", "b"})
    assert plan.excluded_kinds == {"a"}
    assert plan.kind_limits == {"b": 1}


def test_plan_claim_restricted_worker_all_kinds_pre_excluded() -> None:
    assert _plan(kinds=frozenset({"a"}), excluded_kinds=frozenset({"a"})) is None


def test_plan_claim_unrestricted_worker_still_claims_when_limited_kinds_full() -> None:
    plan = _plan(running={"a": 1}, node_limits={"a": 1})
    assert plan is not None
    assert plan.kinds is None
    assert plan.excluded_kinds == {"a"}


def test_plan_claim_passes_cluster_limits_for_claimable_kinds_only() -> None:
    plan = _plan(
        running={"a": 2},
        node_limits={"a": 2},
        cluster_limits={"a": 5, "b": 7, "c": 1},
        excluded_kinds=frozenset({"c"}),
    )
    assert plan is not None
    assert plan.cluster_limits == {"b": 7}
    assert plan.excluded_kinds == {"a", "c"}


def test_plan_claim_passes_tenants_and_excluded_pairs() -> None:
    pairs = frozenset({("a", "t1"), ("b", None)})
    plan = _plan(tenants=frozenset({"t1", "t2"}), excluded=pairs)
    assert plan == ClaimRequest(
        worker_id="w1", limit=4, tenants=frozenset({"t1", "t2"}), excluded=pairs
    )


def test_plan_claim_pre_excluded_kind_not_given_kind_limit() -> None:
    plan = _plan(node_limits={"a": 3}, excluded_kinds=frozenset({"a"}))
    assert plan is not None
    assert plan.kind_limits == {}
    assert plan.excluded_kinds == {"a"}


def test_plan_claim_does_not_mutate_inputs() -> None:
    running = {"a": 1}
    node_limits = {"a": 1, "b": 2}
    cluster_limits = {"a": 3, "b": 4}
    _plan(running=running, node_limits=node_limits, cluster_limits=cluster_limits)
    assert running == {"a": 1}
    assert node_limits == {"a": 1, "b": 2}
    assert cluster_limits == {"a": 3, "b": 4}
