"""Contract tests of the notifier (async source; ``_notifier.py`` is its generated twin).

What wakes a store's notifier and what does not, coalescing, and closing. Tests that a
"no wakeup" holds wait a short moment: a wakeup that is not coming cannot be awaited.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock import core
from skiplock._compat_async import join, spawn

from . import _support_async as kit

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from skiplock.ports import AsyncJobStore, AsyncNotifier


class AsyncNotifierContract(kit.AsyncContractBase):
    """The notifier: woken by what makes a job due."""

    # ---- notifier (R11) -----------------------------------------------------------------

    @kit.requires("listen_notify")
    async def test_notifier_woken_by_enqueue(self, store: AsyncJobStore) -> None:
        notifier = store.notifier()
        assert notifier is not None
        await notifier.start()
        await notifier.start()  # idempotent
        try:
            await kit.enqueue(store)
            assert await notifier.wait(10.0)
        finally:
            await notifier.close()

    @kit.requires("listen_notify")
    async def test_notifier_woken_by_replay_and_immediate_retry(self, store: AsyncJobStore) -> None:
        notifier = store.notifier()
        assert notifier is not None
        await notifier.start()
        try:
            job = await kit.running(store)
            assert await notifier.wait(10.0)  # the enqueue
            await kit.finish(store, job, core.Retry(delay=timedelta(0), error="again"))
            assert await notifier.wait(10.0)
            job = await kit.claim_one(store, job.kind)
            await kit.finish(store, job, core.Bury(error="dead"))
            await store.apply(core.JobFilter(ids=frozenset({job.id})), core.Event.REPLAY)
            assert await notifier.wait(10.0)
        finally:
            await notifier.close()

    @kit.requires("listen_notify")
    async def test_notifier_woken_by_apply_job_replay(self, store: AsyncJobStore) -> None:
        dead = await kit.in_state(store, core.JobState.DEAD)
        async with _listening(store) as notifier:
            await _drain(notifier)
            assert await store.apply_job(dead, core.Event.REPLAY) is not None
            assert await notifier.wait(10.0)

    @kit.requires("listen_notify")
    async def test_notifier_woken_by_jobs_due_later_not_by_claims(
        self, store: AsyncJobStore
    ) -> None:
        # A job due later wakes too: a listening worker arms its next-due timer for it.
        async with _listening(store) as notifier:
            await kit.enqueue(store, delay=timedelta(hours=1))
            assert await notifier.wait(10.0)
            await _drain(notifier)
            await kit.enqueue(store, kit.fresh_kind())
            assert await notifier.wait(10.0)
            await _drain(notifier)
            [job] = await store.claim(kit.claim_request(limit=10))
            assert not await notifier.wait(_QUIET)
            # A retry after a backoff wakes at once (the timer), a success not at all.
            await kit.finish(store, job, core.Retry(delay=timedelta(hours=1), error="later"))
            assert await notifier.wait(10.0)
            await _drain(notifier)
            job = await kit.running(store)
            await _drain(notifier)
            await kit.finish(store, job, core.Succeeded())
            assert not await notifier.wait(_QUIET)

    @kit.requires("listen_notify")
    async def test_notifier_woken_by_a_bulk_enqueue(self, store: AsyncJobStore) -> None:
        async with _listening(store) as notifier:
            await store.enqueue([kit.request() for _ in range(2000)])
            assert await notifier.wait(10.0)

    @kit.requires("listen_notify")
    async def test_notifier_coalesces_a_burst_of_commits(self, store: AsyncJobStore) -> None:
        async with _listening(store) as notifier:
            for i in range(50):
                await kit.enqueue(store, f"contract.burst{i % 3}")
            assert await notifier.wait(10.0)
            assert await _drain(notifier) < 10

    @kit.requires("listen_notify")
    async def test_notifier_closed_during_a_wait_ends_it(self, store: AsyncJobStore) -> None:
        async with _listening(store) as notifier:
            waiting = spawn(notifier.wait, 5.0)
            await notifier.close()
            assert not await join(waiting)
            assert not await notifier.wait(0.1)


#: How long a test waits to see that no wakeup comes.
_QUIET = 0.3


@asynccontextmanager
async def _listening(store: AsyncJobStore) -> AsyncIterator[AsyncNotifier]:
    """The store's notifier, started (and closed afterwards)."""
    notifier = store.notifier()
    assert notifier is not None
    await notifier.start()
    try:
        yield notifier
    finally:
        await notifier.close()


async def _drain(notifier: AsyncNotifier) -> int:
    """Wakeups until the notifier stays quiet for a moment."""
    wakeups = 0
    while await notifier.wait(_QUIET):
        wakeups += 1
    return wakeups
