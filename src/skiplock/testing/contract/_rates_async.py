"""Contract tests of cluster-wide rates (async source; ``_rates.py`` is its generated twin).

A claim with :attr:`ClaimRequest.rates <skiplock.core.ClaimRequest>` takes no job its
token bucket (per (kind, tenant) pair, and per provider) cannot pay for now, draws one
token per job it takes, and says what it left out (:class:`ClaimedJobs`). The buckets
are the store's, shared by every claimer. Rates here are slow (one token per 1,000 s), so
a store on a real clock refills nothing while a test runs, except where a test waits for
a token on purpose.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

from skiplock import core
from skiplock._compat_async import join, spawn
from skiplock.core.store import ClaimedJobs, RateTable

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

_RATED = "contract.rated"
#: One token per 1,000 s: nothing refills while a test runs.
_SLOW = 0.001


def _rates(**kinds: int) -> RateTable:
    """A rate table of kinds ``contract.<name>`` with slow rates and these bursts."""
    return RateTable(
        kinds={f"contract.{name}": core.RateLimit(rps=_SLOW, burst=b) for name, b in kinds.items()}
    )


def _pairs(jobs: list[core.Job]) -> Counter[tuple[str, str | None]]:
    return Counter((job.kind, job.tenant) for job in jobs)


class AsyncRateContract(kit.AsyncContractBase):
    """Cluster-wide rates: shared token buckets, strict under concurrency."""

    async def test_claim_takes_no_more_of_a_pair_than_its_bucket_holds(
        self, store: AsyncJobStore
    ) -> None:
        for _ in range(5):
            await kit.enqueue(store, _RATED, tenant="t1")
        for _ in range(2):
            await kit.enqueue(store, _RATED, tenant="t2")
        free = await kit.enqueue(store, "contract.free")
        rates = _rates(rated=3)
        # Pairs not drawn from yet take at most one burst together (claim order: t1's).
        first = await store.claim(kit.claim_request("w1", rates=rates))
        assert _pairs(first) == {(_RATED, "t1"): 3, ("contract.free", None): 1}
        assert free in kit.ids(first)
        # Another claimer finds t1's bucket empty; t2's is full.
        second = await store.claim(kit.claim_request("w2", rates=rates))
        assert _pairs(second) == {(_RATED, "t2"): 2}
        assert isinstance(second, ClaimedJobs)
        assert second.throttled == {(_RATED, "t1")}
        # Beside what it throttled, what it charged: every job it took (no start_now).
        assert second.charged == set(kit.ids(second))
        assert second.retry_in is not None
        assert second.retry_in > 0
        for _ in range(2):
            await kit.enqueue(store, _RATED, tenant="t2")
        third = await store.claim(kit.claim_request("w3", rates=rates))
        assert _pairs(third) == {(_RATED, "t2"): 1}  # its last token
        fourth = await store.claim(kit.claim_request("w4", rates=rates))
        assert fourth == []
        assert isinstance(fourth, ClaimedJobs)
        assert fourth.throttled == {(_RATED, "t1"), (_RATED, "t2")}

    async def test_claim_without_rates_draws_nothing(self, store: AsyncJobStore) -> None:
        for _ in range(3):
            await kit.enqueue(store, _RATED)
        assert len(await store.claim(kit.claim_request("w1", limit=2))) == 2  # no rates given
        await kit.enqueue(store, _RATED)
        # The bucket is still full: the two jobs claimed without rates cost no token.
        assert len(await store.claim(kit.claim_request("w2", rates=_rates(rated=2)))) == 2

    async def test_claim_pair_rate_replaces_its_kinds(self, store: AsyncJobStore) -> None:
        for tenant in ("vip", "basic"):
            for _ in range(6):
                await kit.enqueue(store, _RATED, tenant=tenant)
        rates = RateTable(
            kinds={_RATED: core.RateLimit(rps=_SLOW, burst=1)},
            pairs={(_RATED, "vip"): core.RateLimit(rps=_SLOW, burst=4)},
        )
        # The kind's cap does not grow for a pair with a rate of its own (a pair of the
        # kind's default without a bucket could take that room): one claim may take
        # fewer than the buckets hold, the claims together take exactly that.
        taken: Counter[tuple[str, str | None]] = Counter()
        for i in range(10):
            claimed = await store.claim(kit.claim_request(f"w{i}", rates=rates))
            if not claimed:
                break
            assert len(claimed) == 1  # the kind's burst bounds each claim
            taken += _pairs(claimed)
        assert taken == {(_RATED, "vip"): 4, (_RATED, "basic"): 1}
        assert await store.claim(kit.claim_request("w", rates=rates)) == []

    async def test_claim_provider_cap_spans_its_kinds(self, store: AsyncJobStore) -> None:
        for kind in ("contract.welcome", "contract.digest"):
            for _ in range(4):
                await kit.enqueue(store, kind)
        cap = core.RateLimit(rps=_SLOW, burst=3)
        rates = RateTable(
            providers={
                "contract.welcome": ("contract.smtp", cap),
                "contract.digest": ("contract.smtp", cap),
            }
        )
        taken: list[core.Job] = []
        for worker in ("w1", "w2", "w3"):
            taken += await store.claim(kit.claim_request(worker, rates=rates))
        assert len(taken) == 3  # the provider's burst, whatever the kinds
        last = await store.claim(kit.claim_request("w4", rates=rates))
        assert last == []
        assert isinstance(last, ClaimedJobs)
        assert last.throttled_kinds == {
            "contract.welcome": "provider",
            "contract.digest": "provider",
        }

    async def test_claim_reports_a_cluster_limit_that_is_full(self, store: AsyncJobStore) -> None:
        for _ in range(3):
            await kit.enqueue(store, "contract.limited")
        limits = {"contract.limited": 1}
        assert len(await store.claim(kit.claim_request("w1", cluster_limits=limits))) == 1
        again = await store.claim(kit.claim_request("w2", cluster_limits=limits))
        assert again == []
        assert isinstance(again, ClaimedJobs)
        assert again.throttled_kinds == {"contract.limited": "cluster_limit"}

    @kit.requires("concurrent")
    async def test_claim_rates_are_strict_under_concurrency(self, store: AsyncJobStore) -> None:
        await store.enqueue([kit.request(_RATED, tenant="t") for _ in range(30)])
        rates = _rates(rated=4)

        async def claimer(worker_id: str) -> list[int]:
            return kit.ids(await store.claim(kit.claim_request(worker_id, 3, rates=rates)))

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        assert len(claimed) == 4
        assert len(set(claimed)) == 4

    async def test_claim_rate_bucket_refills_over_time(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for _ in range(3):
            await kit.enqueue(store, _RATED)
        rates = RateTable(kinds={_RATED: core.RateLimit(rps=20, burst=1)})
        assert len(await store.claim(kit.claim_request("w1", rates=rates))) == 1
        deadline = time.monotonic() + 10
        got: list[core.Job] = []
        while not got and time.monotonic() < deadline:
            got = await store.claim(kit.claim_request("w2", rates=rates))
            if not got:
                assert isinstance(got, ClaimedJobs)
                assert got.retry_in is not None
                assert 0 < got.retry_in <= 0.05 + 1e-6
                clock.advance(0.01)  # time passes on a store with the test's clock too
        assert len(got) == 1  # one token came, and only one

    @kit.requires("controllable_clock")
    async def test_claim_rate_refill_follows_the_store_clock(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for _ in range(5):
            await kit.enqueue(store, _RATED)
        rates = RateTable(kinds={_RATED: core.RateLimit(rps=1, burst=2)})
        assert len(await store.claim(kit.claim_request("w1", rates=rates))) == 2
        empty = await store.claim(kit.claim_request("w1", rates=rates))
        assert empty == []
        assert isinstance(empty, ClaimedJobs)
        assert empty.retry_in == 1.0
        clock.advance(1.5)  # one token and a half
        assert len(await store.claim(kit.claim_request("w1", rates=rates))) == 1
        clock.advance(0.4)
        assert await store.claim(kit.claim_request("w1", rates=rates)) == []
        clock.advance(0.1)
        assert len(await store.claim(kit.claim_request("w1", rates=rates))) == 1

    async def test_health_snapshot_shows_the_buckets_that_are_not_full(
        self, store: AsyncJobStore
    ) -> None:
        assert (await store.health_snapshot()).buckets == ()
        for tenant in ("t1", "t2"):
            await kit.enqueue(store, _RATED, tenant=tenant)
        await kit.enqueue(store, _RATED, tenant="t1")
        cap = core.RateLimit(rps=_SLOW, burst=5)
        rates = RateTable(
            kinds={_RATED: core.RateLimit(rps=_SLOW, burst=2)},
            providers={_RATED: ("contract.provider", cap)},
        )
        claimed = await store.claim(kit.claim_request("w1", rates=rates))
        assert _pairs(claimed) == {(_RATED, "t1"): 1, (_RATED, "t2"): 1}  # one burst
        states = {
            (b.scope, b.name, b.tenant): b.bucket for b in (await store.health_snapshot()).buckets
        }
        assert set(states) == {
            ("pair", _RATED, "t1"),
            ("pair", _RATED, "t2"),
            ("provider", "contract.provider", None),
        }
        assert states["pair", _RATED, "t1"].tokens < 2
        assert states["provider", "contract.provider", None].tokens == 3.0
        assert states["provider", "contract.provider", None].limit == cap
