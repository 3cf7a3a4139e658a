"""Contract tests of the queue samples behind the charts (async source; ``_history.py`` is
its generated twin).

``roll_up_counts()`` takes the samples of the minute holding the store's now, once per
minute (``skiplock.core.store.take_samples`` is the rule), and ``queue_samples()``
reads them back. Mixed into :class:`~.store.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import core
from skiplock.core.store import ALL_KINDS, SAMPLE_RETENTION, sample_minute

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.core.store import QueueSample
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


_MINUTE = timedelta(minutes=1)


async def _this_minute(store: AsyncJobStore) -> dict[str, QueueSample]:
    """Roll up, then the samples of the minute the store's clock is in, by kind (taken
    again if the minute turned between the two calls)."""
    for _ in range(3):
        minute = sample_minute(await store.now())
        await store.roll_up_counts()
        samples = await store.queue_samples(minute, _MINUTE)
        if sample_minute(await store.now()) == minute:
            return {s.kind: s for s in samples if s.minute == minute}
    raise AssertionError("the minute turned three times")  # pragma: no cover


class AsyncHistoryContract(kit.AsyncContractBase):
    """The queue samples of roll_up_counts."""

    async def test_an_empty_queue_is_sampled_as_zeros(self, store: AsyncJobStore) -> None:
        samples = await _this_minute(store)
        assert list(samples) == [ALL_KINDS]
        total = samples[ALL_KINDS]
        assert (total.pending, total.due, total.running, total.claims) == (0, 0, 0, 0)
        assert (total.claim_p50, total.claim_p99, total.due_bounded) == (None, None, False)

    async def test_a_sample_counts_pending_due_and_running_jobs_per_kind(
        self, store: AsyncJobStore
    ) -> None:
        busy, later = kit.fresh_kind(), kit.fresh_kind()
        in_an_hour = await store.now() + timedelta(hours=1)
        await store.enqueue([kit.request(busy) for _ in range(4)])
        await store.enqueue([kit.request(later, available_at=in_an_hour) for _ in range(2)])
        claimed = await store.claim(kit.claim_request(limit=1, kinds=frozenset({busy})))
        assert len(claimed) == 1

        samples = await _this_minute(store)

        assert set(samples) == {ALL_KINDS, busy, later}
        counted = {k: (s.pending, s.due, s.running) for k, s in samples.items()}
        assert counted == {busy: (3, 3, 1), later: (2, 0, 0), ALL_KINDS: (5, 3, 1)}
        assert not any(s.due_bounded for s in samples.values())

    async def test_a_minute_is_sampled_once(self, store: AsyncJobStore) -> None:
        kind = kit.fresh_kind()
        for _ in range(3):
            minute = sample_minute(await store.now())
            await kit.enqueue(store, kind)
            first = await _this_minute(store)
            await kit.enqueue(store, kind)
            again = await _this_minute(store)
            if sample_minute(await store.now()) == minute:
                break
        assert first[kind].pending == again[kind].pending, "the second roll-up took none"
        rows = await store.queue_samples(minute, _MINUTE)
        assert len([s for s in rows if s.minute == minute and s.kind == kind]) == 1

    async def test_samples_are_read_since_a_time(self, store: AsyncJobStore) -> None:
        await _this_minute(store)
        later = sample_minute(await store.now()) + _MINUTE
        assert await store.queue_samples(later, _MINUTE) == []

    @kit.requires("controllable_clock")
    async def test_claim_latency_of_the_jobs_that_succeeded_the_minute_before(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        clock.advance(sample_minute(await store.now()) + timedelta(minutes=1) - await store.now())
        kind = kit.fresh_kind()
        start = await store.now()  # the start of a minute
        await store.enqueue([kit.request(kind) for _ in range(3)])
        for seconds in (2, 4, 30):  # each job waits that long for its claim
            clock.advance(start + timedelta(seconds=seconds) - await store.now())
            [job] = await store.claim(kit.claim_request(limit=1, kinds=frozenset({kind})))
            await kit.finish(store, job, core.Succeeded())

        assert _claims(await _this_minute(store)) == {}  # they finished this minute
        clock.advance(timedelta(minutes=1))
        sampled = await _this_minute(store)
        assert _claims(sampled) == {kind: (3, 4.0), ALL_KINDS: (3, 4.0)}
        # percentile_cont: 0.99 of the way from the second wait to the third, 4 + 0.98 * 26
        assert sampled[kind].claim_p99 == pytest.approx(29.48)
        clock.advance(timedelta(minutes=1))
        assert _claims(await _this_minute(store)) == {}  # two minutes back: not sampled

    @kit.requires("controllable_clock")
    async def test_samples_past_retention_are_removed(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        first = sample_minute(await store.now())
        await _this_minute(store)
        clock.advance(SAMPLE_RETENTION + timedelta(minutes=2))
        await _this_minute(store)
        minutes = {s.minute for s in await store.queue_samples(first, _MINUTE)}
        assert first not in minutes
        assert len(minutes) == 1

    @kit.requires("controllable_clock")
    async def test_samples_are_read_folded_per_bucket(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        """The last sampled minute of a bucket gives its backlog (a kind it does not name
        has none), the claims of every minute add up."""
        clock.advance(sample_minute(await store.now()) + 5 * _MINUTE - await store.now())
        start = await store.now()  # a bucket of 5 minutes starts here
        gone, stays = kit.fresh_kind(), kit.fresh_kind()
        await store.enqueue([kit.request(gone), kit.request(stays), kit.request(stays)])
        await _this_minute(store)  # minute 0: both kinds pending
        for minute in (1, 2):  # one job of each kind succeeds in minutes 0 and 1
            kind = gone if minute == 1 else stays
            [job] = await store.claim(kit.claim_request(limit=1, kinds=frozenset({kind})))
            await kit.finish(store, job, core.Succeeded())
            clock.advance(start + minute * _MINUTE - await store.now())
            await _this_minute(store)  # minutes 1 and 2: each sees the claim before

        folded = await store.queue_samples(start, 5 * _MINUTE)
        assert {s.minute for s in folded} == {start}
        by_kind = {s.kind: (s.pending, s.due, s.claims) for s in folded}
        assert by_kind == {gone: (0, 0, 1), stays: (1, 1, 1), ALL_KINDS: (1, 1, 2)}
        per_minute = await store.queue_samples(start, _MINUTE)
        assert sorted({s.minute for s in per_minute}) == [start + m * _MINUTE for m in range(3)]


def _claims(samples: dict[str, QueueSample]) -> dict[str, tuple[int, float | None]]:
    """(claims, median) per kind with sampled claims."""
    return {k: (s.claims, s.claim_p50) for k, s in samples.items() if s.claims}
