"""Embedding a worker in a host process: no signal handlers unless asked, the host's put
back exactly, and ``in_background()`` (the sync twin ``test_worker_embedding.py`` is
generated)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import Event, join, skip_sync, spawn, wait_event
from skiplock.core import StoreError

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

    from skiplock import AsyncWorker, Job
    from skiplock.core import WorkerInfo

pytestmark = pytest.mark.anyio

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Host:
    """The host process's own handlers of SIGTERM/SIGINT, recording what they receive."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def handler(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    def in_place(self) -> bool:
        return all(signal.getsignal(signum) == self.handler for signum in STOP_SIGNALS)


@pytest.fixture
def host() -> Iterator[Host]:
    host = Host()
    before = {signum: signal.signal(signum, host.handler) for signum in STOP_SIGNALS}
    yield host
    for signum, handler in before.items():
        signal.signal(signum, handler)


def make_engine(**settings: Any) -> tuple[AsyncEngine, CountingStore]:
    store = CountingStore()
    return AsyncEngine(store, Settings(poll_interval=0.01, **settings)), store


async def fail_registration(info: WorkerInfo) -> None:
    raise StoreError("database unreachable")


async def block_until_interrupted(ctx: JobContext) -> None:
    """Wait for an event nobody sets, in short waits so a sync interrupt can land."""
    never = Event()
    while not await wait_event(never, 0.01):
        pass


def released(job: Job) -> bool:
    """Back in pending by a release: no attempt used."""
    return (job.state, job.attempts, job.claimed_by) == (JobState.PENDING, 0, None)


# ---- signal handlers --------------------------------------------------------------------


async def test_worker_leaves_the_host_signal_handlers_alone_by_default(host: Host) -> None:
    engine, _ = make_engine()

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    worker = engine.worker()
    seen: list[object] = []

    async def host_side() -> None:  # sync: a thread, while run() has the main thread
        await eventually(lambda: worker.state == "running")
        seen.append(host.in_place())
        os.kill(os.getpid(), signal.SIGTERM)
        await eventually(lambda: host.received == [signal.SIGTERM])
        seen.append(worker.state)  # the signal was the host's alone
        worker.stop()

    helper = spawn(host_side)
    await worker.run()  # sync: in the main thread, where handlers could be installed
    await join(helper)
    assert seen == [True, "running"]
    assert host.in_place()


async def test_requested_handlers_stop_gracefully_and_are_put_back(host: Host) -> None:
    engine, store = make_engine(shutdown_timeout=30)
    started = Event()
    worker: AsyncWorker

    @engine.processor("slow")
    async def slow(payload: Any, ctx: JobContext) -> None:
        started.set()
        # Running when the signal comes; finishes during the drain.
        await eventually(lambda: worker.state == "draining", 10.0)

    job_id = (await engine.enqueue("slow", {})).id
    worker = engine.worker(install_signal_handlers=True)
    seen: list[bool] = []

    async def host_side() -> None:
        await eventually(started.is_set)
        seen.append(host.in_place())
        os.kill(os.getpid(), signal.SIGTERM)

    helper = spawn(host_side)
    await worker.run()
    await join(helper)
    assert seen == [False]  # the worker's handlers were in place ...
    assert host.received == []  # ... and took the signal
    assert host.in_place()  # the host's are back
    assert (await engine.get_job(job_id)).state is JobState.SUCCEEDED
    assert not worker.forced
    assert store.state.workers() == []


@pytest.mark.parametrize("failure", ["processor exit", "store error"])
async def test_requested_handlers_are_put_back_when_run_raises(
    host: Host, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    engine, store = make_engine()

    @engine.processor("exit")
    async def leave(payload: Any, ctx: JobContext) -> None:
        raise SystemExit(3)

    worker = engine.worker(install_signal_handlers=True)
    if failure == "store error":
        monkeypatch.setattr(store, "register_worker", fail_registration)
        with pytest.raises(StoreError, match="unreachable"):
            await worker.run()
    else:
        await engine.enqueue("exit", {})
        with pytest.raises(SystemExit):
            await worker.run()
    assert host.in_place()


@skip_sync
async def test_event_loop_signal_handlers_stay_in_place() -> None:
    loop = asyncio.get_running_loop()
    before = signal.getsignal(signal.SIGTERM)
    got = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, got.set)
    try:
        engine, _ = make_engine()
        worker = engine.worker(all_kinds=True, install_signal_handlers=True)
        worker.stop()  # stopped before it runs: run() installs, shuts down, uninstalls
        await worker.run()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(got.wait(), 5.0)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, before)


# ---- in_background() --------------------------------------------------------------------


async def test_in_background_drains_running_jobs_when_the_block_ends(host: Host) -> None:
    engine, store = make_engine(shutdown_timeout=30)
    started = Event()
    worker: AsyncWorker

    @engine.processor("slow")
    async def slow(payload: Any, ctx: JobContext) -> None:
        started.set()
        await eventually(lambda: worker.state == "draining", 10.0)

    job_id = (await engine.enqueue("slow", {})).id
    worker = engine.worker(concurrency=2)
    async with worker.in_background() as running:
        assert running is worker
        assert worker.state == "running"  # registered before the block starts
        assert [info.id for info in store.state.workers()] == [worker.id]
        await eventually(started.is_set)
        assert host.in_place()
    assert worker.state == "stopped"
    assert (await engine.get_job(job_id)).state is JobState.SUCCEEDED
    assert not worker.forced
    assert store.state.workers() == []


async def test_in_background_releases_jobs_that_outlive_the_shutdown_timeout() -> None:
    engine, store = make_engine(shutdown_timeout=0.05)
    started = Event()

    @engine.processor("stuck")
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await block_until_interrupted(ctx)

    job_id = (await engine.enqueue("stuck", {})).id
    async with engine.worker().in_background():
        await eventually(started.is_set)
    assert released(await engine.get_job(job_id))
    assert store.state.workers() == []


async def test_in_background_raises_a_worker_failure_when_the_block_ends() -> None:
    engine, _ = make_engine()

    @engine.processor("exit")
    async def leave(payload: Any, ctx: JobContext) -> None:
        raise SystemExit(3)

    await engine.enqueue("exit", {})
    worker = engine.worker()

    async def embedded() -> None:
        async with worker.in_background():
            await eventually(lambda: worker.state == "stopped")  # stopped by the exit

    with pytest.raises(SystemExit) as info:
        await embedded()
    assert info.value.code == 3


async def test_in_background_block_error_wins_over_the_worker_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, _ = make_engine()

    @engine.processor("exit")
    async def leave(payload: Any, ctx: JobContext) -> None:
        raise SystemExit(3)

    await engine.enqueue("exit", {})
    worker = engine.worker()

    async def embedded() -> None:
        async with worker.in_background():
            await eventually(lambda: worker.state == "stopped")
            raise ValueError("mine")

    with caplog.at_level(logging.ERROR, "skiplock.worker"), pytest.raises(ValueError, match="mine"):
        await embedded()
    assert "failed while its block raised ValueError" in caplog.text


async def test_in_background_block_runs_when_the_worker_ended_before_the_host_resumed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A slow host: entering resumes only after the worker served, ran the exiting job and
    # stopped. The block still runs; the worker's SystemExit is its exit's business.
    engine, _ = make_engine()

    @engine.processor("exit")
    async def leave(payload: Any, ctx: JobContext) -> None:
        raise SystemExit(3)

    await engine.enqueue("exit", {})
    worker = engine.worker()
    serving = worker._serving

    class SlowHost:
        def set(self) -> None:
            serving.set()

        async def wait(self) -> None:
            await serving.wait()
            await eventually(lambda: worker.state == "stopped")

    worker._serving = SlowHost()  # type: ignore[assignment]
    ran: list[str] = []

    async def embedded() -> None:
        async with worker.in_background():
            ran.append("block")
            raise ValueError("mine")

    with caplog.at_level(logging.ERROR, "skiplock.worker"), pytest.raises(ValueError, match="mine"):
        await embedded()
    assert ran == ["block"]
    assert "failed while its block raised ValueError" in caplog.text


async def test_in_background_raises_at_once_when_the_worker_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, store = make_engine()
    monkeypatch.setattr(store, "register_worker", fail_registration)
    entered: list[bool] = []

    async def embedded() -> None:
        async with engine.worker(all_kinds=True).in_background():
            entered.append(True)

    with pytest.raises(StoreError, match="unreachable"):
        await embedded()
    assert entered == []


async def test_in_background_forces_the_stop_on_keyboard_interrupt() -> None:
    # A minute of shutdown_timeout: only the forced stop ends the drain quickly.
    engine, store = make_engine(shutdown_timeout=60)
    started = Event()

    @engine.processor("stuck")
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await block_until_interrupted(ctx)

    job_id = (await engine.enqueue("stuck", {})).id
    worker = engine.worker()

    async def embedded() -> None:
        async with worker.in_background():
            await eventually(started.is_set)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await embedded()
    assert worker.forced
    assert released(await engine.get_job(job_id))
    assert store.state.workers() == []


@skip_sync
async def test_in_background_forces_the_stop_when_the_host_task_is_cancelled() -> None:
    engine, store = make_engine(shutdown_timeout=60)
    started = asyncio.Event()

    @engine.processor("stuck")
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await asyncio.Event().wait()

    job_id = (await engine.enqueue("stuck", {})).id
    worker = engine.worker()

    async def host_task() -> None:
        async with worker.in_background():
            await asyncio.Event().wait()

    task = asyncio.create_task(host_task())
    await asyncio.wait_for(started.wait(), 5.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10.0)
    assert worker.forced
    assert released(await engine.get_job(job_id))
    assert store.state.workers() == []


async def test_a_worker_runs_in_background_once() -> None:
    engine, _ = make_engine()
    worker = engine.worker(all_kinds=True)
    async with worker.in_background():
        pass
    again = worker.in_background()
    with pytest.raises(RuntimeError, match="a worker runs once"):
        await again.__aenter__()
