"""Contract tests of the operator's calls (async source; ``_admin.py`` is its generated twin).

Operator transitions, deletes, listing with keyset pages and counts.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

_EVENTS = [core.Event.CANCEL, core.Event.MARK_FAILED, core.Event.REPLAY]
#: Every (state, event) an operator may apply.
_LEGAL = [
    (state, event) for event in _EVENTS for state in core.JobState if state in core.sources(event)
]


async def _with_history(store: AsyncJobStore, state: core.JobState) -> int:
    """A fresh job brought to ``state`` through the port after a failed first attempt, so
    that it records an error (and, succeeded, a result)."""
    job = await kit.running(store, tenant="t", payload=kit.PAYLOAD)
    await kit.finish(store, job, core.Retry(delay=timedelta(0), error="first attempt failed"))
    if state is core.JobState.PENDING:
        return job.id
    if state is core.JobState.CANCELLED or state is core.JobState.FAILED:
        event = core.Event.CANCEL if state is core.JobState.CANCELLED else core.Event.MARK_FAILED
        assert await store.apply(core.JobFilter(ids=frozenset({job.id})), event) == [job.id]
        return job.id
    again = await kit.claim_one(store, job.kind)
    if state is core.JobState.SUCCEEDED:
        await kit.finish(store, again, core.Succeeded(result={"rows": [1, 2]}))
    elif state is core.JobState.DEAD:
        await kit.finish(store, again, core.Bury(error="second attempt failed"))
    return job.id


class AsyncAdminContract(kit.AsyncContractBase):
    """Operator transitions, deletes, listing and counts."""

    # ---- operator transitions (R13) ----------------------------------------------------

    @pytest.mark.parametrize(
        "event", [core.Event.CANCEL, core.Event.MARK_FAILED, core.Event.REPLAY]
    )
    async def test_apply_changes_only_jobs_in_legal_states(
        self, store: AsyncJobStore, event: core.Event
    ) -> None:
        by_state = {state: await kit.in_state(store, state) for state in core.JobState}
        changed = await store.apply(core.JobFilter(ids=frozenset(by_state.values())), event)
        legal = core.sources(event)
        assert sorted(changed) == sorted(by_state[s] for s in core.JobState if s in legal)
        for state, job_id in by_state.items():
            expected = core.transition(state, event) if state in legal else state
            assert (await kit.get(store, job_id)).state is expected, state

    async def test_apply_respects_the_filter(self, store: AsyncJobStore) -> None:
        a = await kit.enqueue(store, "contract.a", tenant="t1", priority=1)
        await kit.enqueue(store, "contract.a", tenant="t2", priority=1)
        await kit.enqueue(store, "contract.b", tenant="t1", priority=1)
        await kit.enqueue(store, "contract.a", tenant="t1", priority=9)
        selected = core.JobFilter(
            kinds=frozenset({"contract.a"}), tenants=frozenset({"t1"}), priority_max=5
        )
        assert await store.apply(selected, core.Event.CANCEL) == [a]
        cancelled = core.JobFilter(states=frozenset({core.JobState.CANCELLED}))
        assert kit.ids(await store.list_jobs(cancelled, core.Page())) == [a]

    async def test_apply_replay_makes_the_job_due_now(self, store: AsyncJobStore) -> None:
        job_id = await kit.in_state(store, core.JobState.DEAD)
        dead = await kit.get(store, job_id)
        assert await store.apply(core.JobFilter(ids=frozenset({job_id})), core.Event.REPLAY) == [
            job_id
        ]
        now = await store.now()
        replayed = await kit.get(store, job_id)
        assert replayed.state is core.JobState.PENDING
        assert replayed.available_at <= now
        assert replayed.claimed_by is None
        assert replayed.claimed_at is None
        assert replayed.completed_at is None
        assert replayed.attempts == dead.attempts == 1
        again = await kit.claim_one(store, dead.kind)
        assert again.attempts == 2

    async def test_apply_replay_can_reset_attempts(self, store: AsyncJobStore) -> None:
        job_id = await kit.in_state(store, core.JobState.DEAD)
        changed = await store.apply(
            core.JobFilter(ids=frozenset({job_id})), core.Event.REPLAY, reset_attempts=True
        )
        assert changed == [job_id]
        replayed = await kit.get(store, job_id)
        assert (replayed.attempts, replayed.claims) == (0, 1)
        again = await kit.claim_one(store, replayed.kind)
        assert (again.attempts, again.claims) == (1, 2)

    async def test_apply_resets_attempts_only_on_replay(self, store: AsyncJobStore) -> None:
        # reset_attempts belongs to a replay: a cancel or a mark failed keeps the attempts.
        for event in (core.Event.CANCEL, core.Event.MARK_FAILED):
            job = await kit.running(store)
            one = core.JobFilter(ids=frozenset({job.id}))
            assert await store.apply(one, event, reset_attempts=True) == [job.id]
            assert (await kit.get(store, job.id)).attempts == 1

    async def test_apply_replay_of_dead_jobs_in_bulk(self, store: AsyncJobStore) -> None:
        dead = sorted([await kit.in_state(store, core.JobState.DEAD) for _ in range(3)])
        await kit.in_state(store, core.JobState.SUCCEEDED)
        only_dead = core.JobFilter(states=frozenset({core.JobState.DEAD}))
        assert sorted(await store.apply(only_dead, core.Event.REPLAY)) == dead
        assert await store.apply(only_dead, core.Event.REPLAY) == []

    # ---- one job, returned (apply_job) -------------------------------------------------

    @pytest.mark.parametrize(
        ("state", "event"), _LEGAL, ids=[f"{e.value}-{s.value}" for s, e in _LEGAL]
    )
    async def test_apply_job_returns_the_changed_job_as_get_reads_it(
        self, store: AsyncJobStore, state: core.JobState, event: core.Event
    ) -> None:
        job_id = await _with_history(store, state)
        before = await kit.get(store, job_id)
        assert before.errors  # what its runs recorded comes back with it
        changed = await store.apply_job(job_id, event)
        assert changed is not None
        assert changed == await kit.get(store, job_id)
        assert changed.state is core.transition(state, event)
        assert (changed.errors, changed.result) == (before.errors, before.result)
        assert (changed.payload, changed.tenant) == (kit.PAYLOAD, "t")

    @pytest.mark.parametrize("reset_attempts", [False, True])
    async def test_apply_job_replay_makes_the_job_due_now(
        self, store: AsyncJobStore, reset_attempts: bool
    ) -> None:
        job_id = await _with_history(store, core.JobState.DEAD)
        replayed = await store.apply_job(job_id, core.Event.REPLAY, reset_attempts=reset_attempts)
        assert replayed is not None
        assert replayed == await kit.get(store, job_id)
        assert replayed.state is core.JobState.PENDING
        assert replayed.available_at <= await store.now()
        assert (replayed.claimed_by, replayed.claimed_at, replayed.completed_at) == (
            None,
            None,
            None,
        )
        assert (replayed.attempts, replayed.claims) == (0 if reset_attempts else 2, 2)
        assert [e.error for e in replayed.errors] == [
            "first attempt failed",
            "second attempt failed",
        ]

    @pytest.mark.parametrize("event", _EVENTS, ids=[e.value for e in _EVENTS])
    async def test_apply_job_refused_by_the_state_returns_none_and_changes_nothing(
        self, store: AsyncJobStore, event: core.Event
    ) -> None:
        refused = [state for state in core.JobState if state not in core.sources(event)]
        assert refused
        for state in refused:
            job_id = await _with_history(store, state)
            before = await kit.get(store, job_id)
            assert await store.apply_job(job_id, event) is None, state
            assert await kit.get(store, job_id) == before, state

    async def test_apply_job_of_an_unknown_job_returns_none(self, store: AsyncJobStore) -> None:
        other = await kit.enqueue(store)
        before = await kit.get(store, other)
        for event in _EVENTS:
            assert await store.apply_job(other + 1_000_000, event) is None, event
        assert await kit.get(store, other) == before

    # ---- delete -------------------------------------------------------------------------

    async def test_delete_removes_matching_jobs_but_not_running_ones(
        self, store: AsyncJobStore
    ) -> None:
        pending = await kit.in_state(store, core.JobState.PENDING)
        running = await kit.in_state(store, core.JobState.RUNNING)
        succeeded = await kit.in_state(store, core.JobState.SUCCEEDED)
        everything = core.JobFilter(ids=frozenset({pending, running, succeeded}))
        deleted = await store.delete(everything)
        assert sorted(kit.ids(deleted)) == sorted([pending, succeeded])
        assert {job.state for job in deleted} == {core.JobState.PENDING, core.JobState.SUCCEEDED}
        assert await store.get(pending) is None
        assert await store.get(succeeded) is None
        assert (await kit.get(store, running)).state is core.JobState.RUNNING

    async def test_delete_with_no_match_returns_nothing(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store, "contract.keep")
        assert await store.delete(core.JobFilter(kinds=frozenset({"contract.other"}))) == []
        assert await store.get(job_id) is not None

    # ---- list and counts (R13, R5) -----------------------------------------------------

    async def test_list_jobs_filters(self, store: AsyncJobStore) -> None:
        a1 = await kit.enqueue(store, "contract.a", tenant="t1", priority=1)
        a2 = await kit.enqueue(store, "contract.a", tenant="t2", priority=5)
        b = await kit.enqueue(store, "contract.b", priority=-3)
        running = await kit.running(store, tenant="t1", priority=2)

        async def ids(**fields: Any) -> list[int]:
            return kit.ids(await store.list_jobs(core.JobFilter(**fields), core.Page()))

        assert await ids() == sorted([a1, a2, b, running.id])
        assert await ids(kinds=frozenset({"contract.a"})) == [a1, a2]
        assert await ids(tenants=frozenset({"t1"})) == [a1, running.id]
        assert await ids(states=frozenset({core.JobState.RUNNING})) == [running.id]
        assert await ids(ids=frozenset({b, a2})) == sorted([a2, b])
        assert await ids(priority_min=2) == [a2, running.id]
        assert await ids(priority_max=1) == [a1, b]
        assert await ids(priority_min=1, priority_max=2, tenants=frozenset({"t1"})) == [
            a1,
            running.id,
        ]
        assert await ids(kinds=frozenset({"contract.none"})) == []

    async def test_list_jobs_time_ranges_are_half_open(self, store: AsyncJobStore) -> None:
        now = await store.now()
        soon, later = now + timedelta(hours=1), now + timedelta(hours=2)
        a = await kit.enqueue(store, "contract.a", available_at=soon)
        b = await kit.enqueue(store, "contract.a", available_at=later)
        created = (await kit.get(store, a)).created_at

        async def ids(**fields: Any) -> list[int]:
            return kit.ids(await store.list_jobs(core.JobFilter(**fields), core.Page()))

        assert await ids(available_since=soon) == [a, b]
        assert await ids(available_since=soon + timedelta(microseconds=1)) == [b]
        assert await ids(available_before=later) == [a]
        assert await ids(available_since=soon, available_before=later) == [a]
        assert await ids(available_before=soon) == []
        assert await ids(created_since=created, ids=frozenset({a})) == [a]
        assert await ids(created_before=created, ids=frozenset({a})) == []
        day = timedelta(days=1)
        assert await ids(created_since=created - day, created_before=created + day) == [a, b]
        assert await ids(created_since=created + day) == []

    async def test_list_jobs_keyset_pages(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([kit.request(payload=i) for i in range(7)])
        ids = sorted(r.id for r in results)
        everything = core.JobFilter()

        pages: list[list[int]] = []
        after: int | None = None
        while page := kit.ids(
            await store.list_jobs(everything, core.Page(limit=3, after_id=after))
        ):
            pages.append(page)
            after = page[-1]
        assert pages == [ids[0:3], ids[3:6], ids[6:7]]

        pages = []
        after = None
        while page := kit.ids(
            await store.list_jobs(everything, core.Page(limit=3, after_id=after, descending=True))
        ):
            pages.append(page)
            after = page[-1]
        down = ids[::-1]
        assert pages == [down[0:3], down[3:6], down[6:7]]

    async def test_list_jobs_cursor_finds_every_match_of_a_sparse_filter(
        self, store: AsyncJobStore
    ) -> None:
        # One job in 25 is of the kind asked for: a store may stop a page's search after
        # JobPage.READ_FACTOR rows per job asked for (resume_after says where), and following
        # next_after() still yields every match once, in order, in both directions.
        results = await store.enqueue(
            [
                kit.request(kind="contract.sparse" if i % 25 == 0 else "contract.dense", payload=i)
                for i in range(3 * 25 * core.JobPage.READ_FACTOR)
            ]
        )
        wanted = sorted(r.id for i, r in enumerate(results) if i % 25 == 0)
        sparse = core.JobFilter(kinds=frozenset({"contract.sparse"}))
        for descending in (False, True):
            seen: list[int] = []
            after: int | None = None
            for _ in range(len(results)):
                page = await store.list_jobs(
                    sparse, core.Page(limit=2, after_id=after, descending=descending)
                )
                assert len(page) <= 2
                if page.resume_after is not None:
                    stop = page.resume_after
                    assert all((i >= stop) if descending else (i <= stop) for i in kit.ids(page))
                seen += kit.ids(page)
                after = page.next_after(2)
                if after is None:
                    break
            assert seen == (wanted[::-1] if descending else wanted), descending

    async def test_counts_per_state_kind_and_tenant(self, store: AsyncJobStore) -> None:
        await kit.enqueue(store, "contract.a", tenant="t1")
        await kit.enqueue(store, "contract.a", tenant="t1")
        await kit.enqueue(store, "contract.a")
        await kit.enqueue(store, "contract.b", tenant="t1")
        job = await kit.claim_one(store, "contract.b")
        await kit.finish(store, job, core.Bury(error="x"))
        counts = {(c.state, c.kind, c.tenant): c.count for c in await store.counts()}
        assert counts == {
            (core.JobState.PENDING, "contract.a", "t1"): 2,
            (core.JobState.PENDING, "contract.a", None): 1,
            (core.JobState.DEAD, "contract.b", "t1"): 1,
        }

    async def test_counts_say_how_long_the_oldest_due_pending_job_waited(
        self, store: AsyncJobStore
    ) -> None:
        now = await store.now()
        await kit.enqueue(store, "contract.a", available_at=now - timedelta(hours=1))
        await kit.enqueue(store, "contract.a", available_at=now - timedelta(minutes=1))
        await kit.enqueue(store, "contract.a", tenant="t1", available_at=now + timedelta(hours=1))
        await kit.enqueue(store, "contract.b")
        job = await kit.claim_one(store, "contract.b")
        await kit.finish(store, job, core.Bury(error="x"))
        ages = {(c.state, c.kind, c.tenant): c.oldest_due_age for c in await store.counts()}
        waited = ages[core.JobState.PENDING, "contract.a", None]
        assert waited is not None
        # Measured on the store's clock a moment after `now`: the hour-old job, not the
        # minute-old one.
        assert 3600 <= waited < 3600 + 60
        assert ages[core.JobState.PENDING, "contract.a", "t1"] == 0.0  # nothing due yet
        assert ages[core.JobState.DEAD, "contract.b", None] is None

    async def test_counts_of_an_empty_store(self, store: AsyncJobStore) -> None:
        assert await store.counts() == []
