"""Contract tests of the operator's calls (async source; ``_admin.py`` is its generated twin).

Operator transitions, deletes, listing with keyset pages and counts.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock.core import (
    Bury,
    Event,
    JobFilter,
    JobPage,
    JobState,
    Page,
    Retry,
    Succeeded,
    sources,
    transition,
)

from ._support_async import (
    _PAYLOAD,
    AsyncContractBase,
    _claim_one,
    _enqueue,
    _finish,
    _get,
    _ids,
    _in_state,
    _request,
    _running,
)

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

_EVENTS = [Event.CANCEL, Event.MARK_FAILED, Event.REPLAY]
#: Every (state, event) an operator may apply.
_LEGAL = [(state, event) for event in _EVENTS for state in JobState if state in sources(event)]


async def _with_history(store: AsyncJobStore, state: JobState) -> int:
    """A fresh job brought to ``state`` through the port after a failed first attempt, so
    that it records an error (and, succeeded, a result)."""
    job = await _running(store, tenant="t", payload=_PAYLOAD)
    await _finish(store, job, Retry(delay=timedelta(0), error="first attempt failed"))
    if state is JobState.PENDING:
        return job.id
    if state is JobState.CANCELLED or state is JobState.FAILED:
        event = Event.CANCEL if state is JobState.CANCELLED else Event.MARK_FAILED
        assert await store.apply(JobFilter(ids=frozenset({job.id})), event) == [job.id]
        return job.id
    again = await _claim_one(store, job.kind)
    if state is JobState.SUCCEEDED:
        await _finish(store, again, Succeeded(result={"rows": [1, 2]}))
    elif state is JobState.DEAD:
        await _finish(store, again, Bury(error="second attempt failed"))
    return job.id


class AsyncAdminContract(AsyncContractBase):
    """Operator transitions, deletes, listing and counts."""

    # ---- operator transitions (R13) ----------------------------------------------------

    @pytest.mark.parametrize("event", [Event.CANCEL, Event.MARK_FAILED, Event.REPLAY])
    async def test_apply_changes_only_jobs_in_legal_states(
        self, store: AsyncJobStore, event: Event
    ) -> None:
        by_state = {state: await _in_state(store, state) for state in JobState}
        changed = await store.apply(JobFilter(ids=frozenset(by_state.values())), event)
        legal = sources(event)
        assert sorted(changed) == sorted(by_state[s] for s in JobState if s in legal)
        for state, job_id in by_state.items():
            expected = transition(state, event) if state in legal else state
            assert (await _get(store, job_id)).state is expected, state

    async def test_apply_respects_the_filter(self, store: AsyncJobStore) -> None:
        a = await _enqueue(store, "contract.a", tenant="t1", priority=1)
        await _enqueue(store, "contract.a", tenant="t2", priority=1)
        await _enqueue(store, "contract.b", tenant="t1", priority=1)
        await _enqueue(store, "contract.a", tenant="t1", priority=9)
        selected = JobFilter(
            kinds=frozenset({"contract.a"}), tenants=frozenset({"t1"}), priority_max=5
        )
        assert await store.apply(selected, Event.CANCEL) == [a]
        cancelled = JobFilter(states=frozenset({JobState.CANCELLED}))
        assert _ids(await store.list_jobs(cancelled, Page())) == [a]

    async def test_apply_replay_makes_the_job_due_now(self, store: AsyncJobStore) -> None:
        job_id = await _in_state(store, JobState.DEAD)
        dead = await _get(store, job_id)
        assert await store.apply(JobFilter(ids=frozenset({job_id})), Event.REPLAY) == [job_id]
        now = await store.now()
        replayed = await _get(store, job_id)
        assert replayed.state is JobState.PENDING
        assert replayed.available_at <= now
        assert replayed.claimed_by is None
        assert replayed.claimed_at is None
        assert replayed.completed_at is None
        assert replayed.attempts == dead.attempts == 1
        again = await _claim_one(store, dead.kind)
        assert again.attempts == 2

    async def test_apply_replay_can_reset_attempts(self, store: AsyncJobStore) -> None:
        job_id = await _in_state(store, JobState.DEAD)
        changed = await store.apply(
            JobFilter(ids=frozenset({job_id})), Event.REPLAY, reset_attempts=True
        )
        assert changed == [job_id]
        replayed = await _get(store, job_id)
        assert (replayed.attempts, replayed.claims) == (0, 1)
        again = await _claim_one(store, replayed.kind)
        assert (again.attempts, again.claims) == (1, 2)

    async def test_apply_resets_attempts_only_on_replay(self, store: AsyncJobStore) -> None:
        # reset_attempts belongs to a replay: a cancel or a mark failed keeps the attempts.
        for event in (Event.CANCEL, Event.MARK_FAILED):
            job = await _running(store)
            one = JobFilter(ids=frozenset({job.id}))
            assert await store.apply(one, event, reset_attempts=True) == [job.id]
            assert (await _get(store, job.id)).attempts == 1

    async def test_apply_replay_of_dead_jobs_in_bulk(self, store: AsyncJobStore) -> None:
        dead = sorted([await _in_state(store, JobState.DEAD) for _ in range(3)])
        await _in_state(store, JobState.SUCCEEDED)
        only_dead = JobFilter(states=frozenset({JobState.DEAD}))
        assert sorted(await store.apply(only_dead, Event.REPLAY)) == dead
        assert await store.apply(only_dead, Event.REPLAY) == []

    # ---- one job, returned (apply_job) -------------------------------------------------

    @pytest.mark.parametrize(
        ("state", "event"), _LEGAL, ids=[f"{e.value}-{s.value}" for s, e in _LEGAL]
    )
    async def test_apply_job_returns_the_changed_job_as_get_reads_it(
        self, store: AsyncJobStore, state: JobState, event: Event
    ) -> None:
        job_id = await _with_history(store, state)
        before = await _get(store, job_id)
        assert before.errors  # what its runs recorded comes back with it
        changed = await store.apply_job(job_id, event)
        assert changed is not None
        assert changed == await _get(store, job_id)
        assert changed.state is transition(state, event)
        assert (changed.errors, changed.result) == (before.errors, before.result)
        assert (changed.payload, changed.tenant) == (_PAYLOAD, "t")

    @pytest.mark.parametrize("reset_attempts", [False, True])
    async def test_apply_job_replay_makes_the_job_due_now(
        self, store: AsyncJobStore, reset_attempts: bool
    ) -> None:
        job_id = await _with_history(store, JobState.DEAD)
        replayed = await store.apply_job(job_id, Event.REPLAY, reset_attempts=reset_attempts)
        assert replayed is not None
        assert replayed == await _get(store, job_id)
        assert replayed.state is JobState.PENDING
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
        self, store: AsyncJobStore, event: Event
    ) -> None:
        refused = [state for state in JobState if state not in sources(event)]
        assert refused
        for state in refused:
            job_id = await _with_history(store, state)
            before = await _get(store, job_id)
            assert await store.apply_job(job_id, event) is None, state
            assert await _get(store, job_id) == before, state

    async def test_apply_job_of_an_unknown_job_returns_none(self, store: AsyncJobStore) -> None:
        other = await _enqueue(store)
        before = await _get(store, other)
        for event in _EVENTS:
            assert await store.apply_job(other + 1_000_000, event) is None, event
        assert await _get(store, other) == before

    # ---- delete -------------------------------------------------------------------------

    async def test_delete_removes_matching_jobs_but_not_running_ones(
        self, store: AsyncJobStore
    ) -> None:
        pending = await _in_state(store, JobState.PENDING)
        running = await _in_state(store, JobState.RUNNING)
        succeeded = await _in_state(store, JobState.SUCCEEDED)
        everything = JobFilter(ids=frozenset({pending, running, succeeded}))
        deleted = await store.delete(everything)
        assert sorted(_ids(deleted)) == sorted([pending, succeeded])
        assert {job.state for job in deleted} == {JobState.PENDING, JobState.SUCCEEDED}
        assert await store.get(pending) is None
        assert await store.get(succeeded) is None
        assert (await _get(store, running)).state is JobState.RUNNING

    async def test_delete_with_no_match_returns_nothing(self, store: AsyncJobStore) -> None:
        job_id = await _enqueue(store, "contract.keep")
        assert await store.delete(JobFilter(kinds=frozenset({"contract.other"}))) == []
        assert await store.get(job_id) is not None

    # ---- list and counts (R13, R5) -----------------------------------------------------

    async def test_list_jobs_filters(self, store: AsyncJobStore) -> None:
        a1 = await _enqueue(store, "contract.a", tenant="t1", priority=1)
        a2 = await _enqueue(store, "contract.a", tenant="t2", priority=5)
        b = await _enqueue(store, "contract.b", priority=-3)
        running = await _running(store, tenant="t1", priority=2)

        async def ids(**fields: Any) -> list[int]:
            return _ids(await store.list_jobs(JobFilter(**fields), Page()))

        assert await ids() == sorted([a1, a2, b, running.id])
        assert await ids(kinds=frozenset({"contract.a"})) == [a1, a2]
        assert await ids(tenants=frozenset({"t1"})) == [a1, running.id]
        assert await ids(states=frozenset({JobState.RUNNING})) == [running.id]
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
        a = await _enqueue(store, "contract.a", available_at=soon)
        b = await _enqueue(store, "contract.a", available_at=later)
        created = (await _get(store, a)).created_at

        async def ids(**fields: Any) -> list[int]:
            return _ids(await store.list_jobs(JobFilter(**fields), Page()))

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
        results = await store.enqueue([_request(payload=i) for i in range(7)])
        ids = sorted(r.id for r in results)
        everything = JobFilter()

        pages: list[list[int]] = []
        after: int | None = None
        while page := _ids(await store.list_jobs(everything, Page(limit=3, after_id=after))):
            pages.append(page)
            after = page[-1]
        assert pages == [ids[0:3], ids[3:6], ids[6:7]]

        pages = []
        after = None
        while page := _ids(
            await store.list_jobs(everything, Page(limit=3, after_id=after, descending=True))
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
                _request(kind="contract.sparse" if i % 25 == 0 else "contract.dense", payload=i)
                for i in range(3 * 25 * JobPage.READ_FACTOR)
            ]
        )
        wanted = sorted(r.id for i, r in enumerate(results) if i % 25 == 0)
        sparse = JobFilter(kinds=frozenset({"contract.sparse"}))
        for descending in (False, True):
            seen: list[int] = []
            after: int | None = None
            for _ in range(len(results)):
                page = await store.list_jobs(
                    sparse, Page(limit=2, after_id=after, descending=descending)
                )
                assert len(page) <= 2
                if page.resume_after is not None:
                    stop = page.resume_after
                    assert all((i >= stop) if descending else (i <= stop) for i in _ids(page))
                seen += _ids(page)
                after = page.next_after(2)
                if after is None:
                    break
            assert seen == (wanted[::-1] if descending else wanted), descending

    async def test_counts_per_state_kind_and_tenant(self, store: AsyncJobStore) -> None:
        await _enqueue(store, "contract.a", tenant="t1")
        await _enqueue(store, "contract.a", tenant="t1")
        await _enqueue(store, "contract.a")
        await _enqueue(store, "contract.b", tenant="t1")
        job = await _claim_one(store, "contract.b")
        await _finish(store, job, Bury(error="x"))
        counts = {(c.state, c.kind, c.tenant): c.count for c in await store.counts()}
        assert counts == {
            (JobState.PENDING, "contract.a", "t1"): 2,
            (JobState.PENDING, "contract.a", None): 1,
            (JobState.DEAD, "contract.b", "t1"): 1,
        }

    async def test_counts_say_how_long_the_oldest_due_pending_job_waited(
        self, store: AsyncJobStore
    ) -> None:
        now = await store.now()
        await _enqueue(store, "contract.a", available_at=now - timedelta(hours=1))
        await _enqueue(store, "contract.a", available_at=now - timedelta(minutes=1))
        await _enqueue(store, "contract.a", tenant="t1", available_at=now + timedelta(hours=1))
        await _enqueue(store, "contract.b")
        job = await _claim_one(store, "contract.b")
        await _finish(store, job, Bury(error="x"))
        ages = {(c.state, c.kind, c.tenant): c.oldest_due_age for c in await store.counts()}
        waited = ages[JobState.PENDING, "contract.a", None]
        assert waited is not None
        # Measured on the store's clock a moment after `now`: the hour-old job, not the
        # minute-old one.
        assert 3600 <= waited < 3600 + 60
        assert ages[JobState.PENDING, "contract.a", "t1"] == 0.0  # nothing due yet
        assert ages[JobState.DEAD, "contract.b", None] is None

    async def test_counts_of_an_empty_store(self, store: AsyncJobStore) -> None:
        assert await store.counts() == []
