"""Cluster-wide rates (skiplock.core._rates): narrowing a claim to what shared buckets
hold, and charging them for what it took."""

from __future__ import annotations

from datetime import UTC, datetime

from skiplock.core import ClaimRequest, Job, JobState, RateLimit
from skiplock.core._bucket import RateTable, TokenBucket, charge, new_bucket
from skiplock.core._capacity import plan_claim, throttle_limits
from skiplock.core._controls import Limit
from skiplock.core._rates import (
    charges,
    claim_is_serialized,
    outlived_buckets,
    rate_holds,
    rated_kinds,
    rated_providers,
    throttled_request,
)

SLOW = RateLimit(rps=1, burst=3)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(kind: str, tenant: str | None, job_id: int = 1) -> Job:
    return Job(
        id=job_id,
        kind=kind,
        tenant=tenant,
        payload=None,
        state=JobState.RUNNING,
        priority=0,
        available_at=T0,
        created_at=T0,
        attempts=1,
        max_attempts=3,
    )


def request(**fields: object) -> ClaimRequest:
    return ClaimRequest(worker_id="w", limit=10, **fields)  # type: ignore[arg-type]


def test_rate_table_looks_up_a_pair_then_its_kind() -> None:
    vip = RateLimit(rps=5, burst=10)
    table = RateTable(kinds={"k": SLOW}, pairs={("k", "vip"): vip})
    assert table.rate_for("k", "vip") == vip
    assert table.rate_for("k", "other") == SLOW
    assert table.rate_for("free", None) is None
    assert not RateTable()
    assert table.limited_kinds() == {"k"}


def test_rated_kinds_are_the_requested_kinds_with_a_rate() -> None:
    table = RateTable(kinds={"a": SLOW, "b": SLOW}, providers={"c": ("p", SLOW)})
    assert rated_kinds(request()) == []
    assert rated_kinds(request(rates=table)) == ["a", "b", "c"]
    only = request(rates=table, kinds=frozenset({"a", "x"}))
    assert rated_kinds(only) == ["a"]
    excluded = request(rates=table, excluded_kinds=frozenset({"b"}))
    assert rated_kinds(excluded) == ["a", "c"]
    assert rated_providers(request(rates=table), ["a", "c"]) == ["p"]
    assert claim_is_serialized(request(rates=table))
    assert not claim_is_serialized(request())


def test_throttled_request_excludes_empty_pairs_and_caps_drawn_ones() -> None:
    table = RateTable(kinds={"k": SLOW})
    buckets = [
        (("k", "empty"), TokenBucket(SLOW, tokens=0.5, updated=100.0)),
        (("k", "two"), TokenBucket(SLOW, tokens=2.2, updated=100.0)),
    ]
    narrowed, limits = throttled_request(
        request(rates=table), now=100.0, pair_buckets=buckets, provider_buckets={}
    )
    assert narrowed.excluded == {("k", "empty")}
    assert narrowed.pair_limits == {("k", "two"): 2}
    assert narrowed.kind_limits == {"k": 3 + 2}  # a burst for fresh pairs, plus "two"
    assert limits.retry_in == 0.5


def test_throttled_request_gives_a_pair_rate_its_own_limit() -> None:
    vip = RateLimit(rps=1, burst=5)
    table = RateTable(kinds={"k": SLOW}, pairs={("k", "vip"): vip})
    narrowed, _ = throttled_request(
        request(rates=table), now=0.0, pair_buckets=[], provider_buckets={}
    )
    assert narrowed.pair_limits == {("k", "vip"): 5}


def test_throttled_request_splits_a_provider_among_its_kinds() -> None:
    cap = RateLimit(rps=1, burst=3)
    table = RateTable(providers={"a": ("p", cap), "b": ("p", cap)})
    for now in (0.0, 1.0):
        narrowed, _ = throttled_request(
            request(rates=table), now=now, pair_buckets=[], provider_buckets={}
        )
        assert sum(narrowed.kind_limits.values()) == 3
        assert sorted(narrowed.kind_limits.values()) == [1, 2]
    empty = {"p": TokenBucket(cap, tokens=0.0, updated=0.0)}
    narrowed, limits = throttled_request(
        request(rates=table), now=0.0, pair_buckets=[], provider_buckets=empty
    )
    assert narrowed.excluded_kinds == {"a", "b"}
    assert limits.retry_in == 1.0


def test_charges_take_one_token_per_claimed_job() -> None:
    cap = RateLimit(rps=2, burst=4)
    table = RateTable(kinds={"k": SLOW}, providers={"k": ("p", cap)})
    drawn = TokenBucket(SLOW, tokens=1.0, updated=9.0)
    pairs, providers = charges(
        request(rates=table),
        [job("k", "a", 1), job("k", "a", 2), job("k", "b", 3), job("free", None, 4)],
        now=10.0,
        pair_buckets={("k", "b"): drawn},
        provider_buckets={},
    )
    assert pairs == [
        (("k", "a"), TokenBucket(SLOW, tokens=1.0, updated=10.0)),
        (("k", "b"), TokenBucket(SLOW, tokens=1.0, updated=10.0)),  # refilled 1, took 1
    ]
    assert providers == [("p", TokenBucket(cap, tokens=1.0, updated=10.0))]


def test_charge_of_a_changed_limit_starts_full() -> None:
    old = TokenBucket(SLOW, tokens=0.0, updated=0.0)
    fast = RateLimit(rps=10, burst=10)
    assert charge(old, fast, 2, 0.0) == TokenBucket(fast, tokens=8.0, updated=0.0)
    assert charge(None, SLOW, 1, 5.0) == TokenBucket(SLOW, tokens=2.0, updated=5.0)
    assert new_bucket(SLOW, 1.0).tokens == 3.0


def test_throttle_limits_pair_rates_bind_even_when_full() -> None:
    vip = RateLimit(rps=1, burst=2)
    limits = throttle_limits(
        now=0.0,
        rate_limits={},
        pair_buckets=[],
        provider_caps={},
        provider_buckets={},
        pair_rates={("k", "vip"): vip},
    )
    assert limits.pair_limits == {("k", "vip"): 2}
    assert limits.kind_caps == {}  # the kind's other tenants are not limited


def test_plan_claim_prefetch_limits_cap_a_kind_at_what_starts_now() -> None:
    def plan(start_now: int | None, prefetch: dict[str, int]) -> ClaimRequest | None:
        return plan_claim(
            worker_id="w",
            free_slots=10,
            batch_size=10,
            running={},
            node_limits={},
            cluster_limits={},
            kinds=frozenset({"limited", "free"}),
            tenants=None,
            start_now=start_now,
            prefetch_limits=prefetch,
        )

    two = plan(2, {"limited": 0})
    assert two is not None
    assert two.kind_limits == {"limited": 2}
    nothing_free = plan(0, {"limited": 0})
    assert nothing_free is not None
    assert "limited" in nothing_free.excluded_kinds
    assert plan(0, {"limited": 0, "free": 0}) is None
    held = plan(2, {"limited": 3})
    assert held is not None
    assert held.kind_limits == {"limited": 5}
    starting = plan(None, {"limited": 0})  # every claimed job starts: nothing is held
    assert starting is not None
    assert starting.kind_limits == {}


def test_plan_claim_passes_rates_of_the_kinds_still_claimed() -> None:
    table = RateTable(kinds={"a": SLOW, "b": SLOW})
    planned = plan_claim(
        worker_id="w",
        free_slots=4,
        batch_size=4,
        running={"b": 1},
        node_limits={"b": 1},
        cluster_limits={},
        kinds=None,
        tenants=None,
        rates=table,
    )
    assert planned is not None
    assert planned.rates == RateTable(kinds={"a": SLOW})


FAST = RateLimit(rps=10, burst=5)


def empty(limit: RateLimit) -> TokenBucket:
    return TokenBucket(limit=limit, tokens=0.0, updated=100.0)


def test_clearing_a_limit_drops_the_buckets_counted_under_it() -> None:
    pairs = {
        ("k", None): empty(SLOW),
        ("k", "a"): empty(SLOW),  # a limit of its own, the same rate
        ("k", "b"): empty(FAST),  # a rate of the code's
        ("other", None): empty(SLOW),
    }
    providers = {"smtp": empty(SLOW), "sms": empty(FAST)}
    own = Limit(SLOW, kind="k", tenant="a")
    assert outlived_buckets(Limit(SLOW, kind="k"), [own], pairs, providers) == ([("k", None)], [])
    assert outlived_buckets(own, [], pairs, providers) == ([("k", "a")], [])
    default = Limit(SLOW, kind="k")
    assert outlived_buckets(default, [], pairs, providers) == ([("k", None), ("k", "a")], [])
    assert outlived_buckets(Limit(SLOW, provider="smtp"), [], pairs, providers) == ([], ["smtp"])
    assert outlived_buckets(Limit(SLOW, provider="sms"), [], pairs, providers) == ([], [])


def test_rate_holds_decides_as_the_claim_with_the_rates_in_force() -> None:
    pairs: dict[tuple[str, str | None], TokenBucket] = {("k", None): empty(SLOW)}
    providers = {"smtp": empty(SLOW)}
    # The rate in force: its used-up bucket holds the pair back.
    assert rate_holds(RateTable(kinds={"k": SLOW}), ("k", None), 100.0, (pairs, {})) == (
        pairs["k", None],
        None,
    )
    # Another rate in force: the old bucket counts as full, as for the claim.
    assert rate_holds(RateTable(kinds={"k": FAST}), ("k", None), 100.0, (pairs, {})) == (None, None)
    # No rate known (declared only in the workers' code): the bucket's own limit.
    assert rate_holds(RateTable(), ("k", None), 100.0, (pairs, {})) == (pairs["k", None], None)
    assert rate_holds(RateTable(), ("k", "t"), 100.0, (pairs, {})) == (None, None)
    capped = RateTable(providers={"k": ("smtp", SLOW)})
    assert rate_holds(capped, ("k", "t"), 100.0, ({}, providers)) == (None, "smtp")
    recapped = RateTable(providers={"k": ("smtp", FAST)})
    assert rate_holds(recapped, ("k", "t"), 100.0, ({}, providers)) == (None, None)
