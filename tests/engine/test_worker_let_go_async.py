"""Jobs a stopping worker lets go stay held for its heartbeat until their release is
queued (the sync twin ``test_worker_let_go.py`` is generated).

A heartbeat releases the worker's running jobs it does not list (``release_unheld``:
marked ``recovered``). At shutdown the held (prefetched) jobs leave the held buffer and
their releases go to the completer; a heartbeat read in between (another thread in the
sync flavour) would list neither and release them first, ``recovered`` instead of given
back. The ordering is controlled, not timed: the completer's ``submit`` runs, just
before queueing each release, the heartbeat the lease keeper would send at that moment
(``held_ids()``, on the store's state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import Event, join, spawn, wait_event
from skiplock.core import Release
from skiplock.engine.worker import _completer_async

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from skiplock import Job
    from skiplock.engine.worker._completer_async import Completer, Done
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


def job_of(store: CountingStore, job_id: int) -> Job:
    job = store.state.get(job_id)
    assert job is not None
    return job


async def test_a_heartbeat_while_held_jobs_are_let_go_at_shutdown_leaves_them_to_their_release(
    clock: FakeClock,
) -> None:
    store = CountingStore(clock=clock)
    engine = AsyncEngine(store, Settings(poll_interval=60.0, prefetch=3), clock=clock)
    go = Event()

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        assert await wait_event(go, 5.0)

    ids = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(4)]
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    listed: dict[int, bool] = {}
    submit = _completer_async.Completer.submit

    def submit_after_a_heartbeat(self: Completer, done: Done) -> bool:
        if isinstance(done.outcome, Release):
            held = worker._dispatcher.held_ids()
            listed[done.job.id] = done.job.id in held
            # The heartbeat of this moment, claimed jobs older than the one before it.
            clock.advance(1.0)
            store.state.heartbeat(worker.id, held)
            clock.advance(1.0)
            store.state.heartbeat(worker.id, held, release_unheld=True)
        return submit(self, done)

    first, *held = ids
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_completer_async.Completer, "submit", submit_after_a_heartbeat)
        task = spawn(worker.run)
        await eventually(lambda: all(job_of(store, i).state is JobState.RUNNING for i in ids))
        worker.stop()
        go.set()
        await join(task)
    assert listed == dict.fromkeys(held, True)
    assert job_of(store, first).state is JobState.SUCCEEDED
    for job_id in held:
        row = job_of(store, job_id)
        # Given back by its release (never charged), not recovered by the heartbeat.
        assert (row.state, row.attempts, row.recovered) == (JobState.PENDING, 0, False)
