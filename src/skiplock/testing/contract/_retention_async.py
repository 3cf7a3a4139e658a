"""Contract tests of the retention view (issue 45; docs/retention.md) (async source;
``_retention.py`` is its generated twin): ``ReadsRole.retention`` counts what the next
``purge`` and ``purge_audit`` remove, and reports the last run each recorded. Mixed into
:class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock import core

from . import _support_async as kit
from ._audit_events_async import _audit, _one

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncRetentionContract(kit.AsyncContractBase):
    """The retention view: rows due per purge window, and each purge's last run."""

    def _window(self, clock: FakeClock) -> timedelta:
        """The window that makes what was done so far due: an hour after moving the clock
        two on, or 0 on a store whose clock moves by itself."""
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
            return timedelta(hours=1)
        return timedelta(0)

    async def test_retention_counts_the_succeeded_jobs_the_next_purge_removes(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for _ in range(3):
            await kit.in_state(store, core.JobState.SUCCEEDED)
        await kit.in_state(store, core.JobState.DEAD)  # never purged by retention
        window = self._window(clock)
        if self.capabilities.controllable_clock:
            await kit.in_state(store, core.JobState.SUCCEEDED)  # within the window
        view = await store.retention(jobs=window, audit=None)
        jobs, audit = view.window("jobs"), view.window("audit")
        assert (jobs.window, jobs.due, jobs.estimated) == (window, 3, False)
        assert (audit.window, audit.due) == (None, None)
        assert await store.purge(older_than=window, archive=False, batch_size=2) == 3
        assert (await store.retention(jobs=window, audit=None)).window("jobs").due == 0

    async def test_retention_counts_the_audit_events_the_next_purge_removes(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for _ in range(3):
            job_id = await kit.enqueue(store)
            await store.apply(_one(job_id), core.Event.CANCEL, audit=_audit())
        window = self._window(clock)
        view = await store.retention(jobs=None, audit=window)
        assert (view.window("jobs").window, view.window("jobs").due) == (None, None)
        audit = view.window("audit")
        assert (audit.window, audit.due, audit.estimated) == (window, 3, False)

    async def test_retention_reports_no_run_before_the_first_purge(
        self, store: AsyncJobStore
    ) -> None:
        view = await store.retention(jobs=timedelta(days=1), audit=timedelta(days=1))
        assert [w.name for w in view.windows] == ["jobs", "audit"]
        assert [w.last_run for w in view.windows] == [None, None]
        assert [w.due for w in view.windows] == [0, 0]

    async def test_each_purge_records_its_last_run(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for _ in range(3):
            await kit.in_state(store, core.JobState.SUCCEEDED)
        job_id = await kit.enqueue(store)
        await store.apply(_one(job_id), core.Event.CANCEL, audit=_audit())
        window = self._window(clock)
        before = await store.now()
        assert await store.purge(older_than=window, archive=False, batch_size=2) == 3
        view = await store.retention(jobs=window, audit=window)
        run = view.window("jobs").last_run
        assert run is not None
        assert run.removed == 3
        assert run.seconds >= 0
        assert before <= run.finished_at <= view.now
        assert view.window("audit").last_run is None  # the audit purge has not run
        assert await store.purge_audit(older_than=window, batch_size=10) == 1
        assert await store.purge(older_than=window, archive=False, batch_size=2) == 0
        view = await store.retention(jobs=window, audit=window)
        jobs_run, audit_run = view.window("jobs").last_run, view.window("audit").last_run
        assert jobs_run is not None
        assert jobs_run.removed == 0  # a run that found nothing is a run too
        assert audit_run is not None
        assert audit_run.removed == 1
