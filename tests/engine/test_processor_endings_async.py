"""Every way a processor ends is a defined state (issue 9): return, raise an exception,
raise any other BaseException, exit the process, return an awaitable from a plain
function. Each test ends with nothing ``running`` under the worker, the other jobs done and
the bad job failed with a readable ``last_error`` (AsyncWorker; the sync twin ``Worker``
is generated)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import Event, join, skip_sync, spawn, wait_event

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def make_engine(store: CountingStore, clock: FakeClock, **kw: Any) -> AsyncEngine:
    return AsyncEngine(store, Settings(poll_interval=0.01, **kw), clock=clock)


def states(store: CountingStore) -> set[JobState]:
    """The states the store's jobs are in."""
    return {count.state for count in store.state.counts()}


def state_of(store: CountingStore, job_id: int) -> JobState:
    job = store.state.get(job_id)
    assert job is not None
    return job.state


# ---- BaseExceptions other than an exit: a failed attempt, the worker serves on --------

#: What a processor raises, and the end of the first line of its ``last_error``.
ENDINGS = pytest.mark.parametrize(
    ("error", "text"),
    [
        (asyncio.CancelledError("cancelled by myself"), "CancelledError: cancelled by myself"),
        (GeneratorExit("closing"), "GeneratorExit: closing"),
        (BaseException("bare"), "BaseException: bare"),
    ],
    ids=["cancelled", "generator-exit", "bare"],
)


async def fails_its_attempt(engine: AsyncEngine, store: CountingStore, text: str) -> None:
    """Run a "bad" job among "good" ones under a live worker: the bad one is dead after
    one attempt with ``text`` in its error, the others succeeded, the worker serves on."""
    bad_id = (await engine.enqueue("bad")).id
    good_ids = [(await engine.enqueue("good", {"i": i})).id for i in range(5)]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: state_of(store, bad_id) is JobState.DEAD)
    await eventually(lambda: not states(store) & {JobState.RUNNING, JobState.PENDING})
    assert worker.state == "running"
    job = await engine.get_job(bad_id)
    assert job.attempts == 1
    assert (job.last_error or "").partition("\n")[0].endswith(text)
    assert "Traceback" in (job.last_error or "")
    assert {(await engine.get_job(i)).state for i in good_ids} == {JobState.SUCCEEDED}
    worker.stop()
    await join(task)
    assert JobState.RUNNING not in states(store)


@ENDINGS
async def test_a_base_exception_from_a_processor_is_a_failed_attempt(
    store: CountingStore, clock: FakeClock, error: BaseException, text: str
) -> None:
    engine = make_engine(store, clock, concurrency=2)

    @engine.processor("bad", max_attempts=1)
    async def bad(payload: Any, ctx: JobContext) -> None:
        raise error

    @engine.processor("good")
    async def good(payload: Any, ctx: JobContext) -> None: ...

    await fails_its_attempt(engine, store, text)


@skip_sync
@ENDINGS
async def test_a_base_exception_from_a_plain_function_is_a_failed_attempt(
    store: CountingStore, clock: FakeClock, error: BaseException, text: str
) -> None:
    # Async only: a plain function runs in a thread, and what it raises comes back
    # through a future.
    engine = make_engine(store, clock, concurrency=2)

    @engine.processor("bad", max_attempts=1)
    def bad(payload: Any) -> None:
        raise error

    @engine.processor("good")
    def good(payload: Any) -> None: ...

    await fails_its_attempt(engine, store, text)


@skip_sync
async def test_the_workers_own_cancellation_still_releases_the_job(
    store: CountingStore, clock: FakeClock
) -> None:
    # A cancelled run() is a forced stop: the job the worker interrupted goes back to
    # pending without paying, although its processor saw a CancelledError.
    engine = make_engine(store, clock)
    started = Event()

    @engine.processor("long")
    async def long(payload: Any, ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    job_id = (await engine.enqueue("long")).id
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(started.is_set)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts, job.last_error) == (JobState.PENDING, 0, None)


# ---- SystemExit / KeyboardInterrupt: a failed attempt, then a graceful stop ------------


@pytest.mark.parametrize("exit_error", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "kbd"])
async def test_an_exit_from_a_processor_fails_its_attempt_and_stops_the_worker(
    store: CountingStore, clock: FakeClock, exit_error: BaseException
) -> None:
    engine = make_engine(store, clock, concurrency=2, prefetch=4, shutdown_timeout=5.0)
    long_started, release = Event(), Event()

    @engine.processor("long")
    async def long(payload: Any, ctx: JobContext) -> None:
        long_started.set()
        assert await wait_event(release, 5.0)

    @engine.processor("bad", max_attempts=1)
    async def bad(payload: Any, ctx: JobContext) -> None:
        assert await wait_event(long_started, 5.0)
        raise exit_error

    @engine.processor("queued")
    async def queued(payload: Any, ctx: JobContext) -> None:
        raise AssertionError("held jobs never start once the worker stops")

    long_id = (await engine.enqueue("long", priority=2)).id
    bad_id = (await engine.enqueue("bad", priority=1)).id
    held = [(await engine.enqueue("queued", {"i": i})).id for i in range(4)]
    worker = engine.worker(install_signal_handlers=False)

    async def release_once_draining() -> None:
        # The exit stops the worker as stop() does: the running job may finish.
        await eventually(lambda: worker.state == "draining")
        release.set()

    # Async only: not in a task of its own, as asyncio lets an exit raised by a task end
    # the loop.
    helper = spawn(release_once_draining)
    with pytest.raises(type(exit_error)) as raised:
        await worker.run()
    await join(helper)
    assert raised.value is exit_error
    assert not worker.forced
    assert JobState.RUNNING not in states(store)
    assert store.state.workers() == []
    bad_job = await engine.get_job(bad_id)
    assert (bad_job.state, bad_job.attempts) == (JobState.DEAD, 1)
    assert (bad_job.last_error or "").startswith(type(exit_error).__name__)
    assert (await engine.get_job(long_id)).state is JobState.SUCCEEDED
    for job_id in held:  # claimed and held, never started: released without paying
        job = await engine.get_job(job_id)
        assert (job.state, job.attempts, job.claimed_by) == (JobState.PENDING, 0, None)


async def test_an_exit_from_a_processor_ends_run_until_idle_too(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=1)

    @engine.processor("bad", max_attempts=3, backoff_base=0)
    async def bad(payload: Any, ctx: JobContext) -> None:
        raise SystemExit("bye")

    job_id = (await engine.enqueue("bad")).id
    with pytest.raises(SystemExit, match="bye"):
        await engine.worker().run_until_idle()
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.PENDING, 1)  # a retry, not a release
    assert (job.last_error or "").startswith("SystemExit: bye")
    assert JobState.RUNNING not in states(store)


@pytest.mark.parametrize("exit_error", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "kbd"])
async def test_with_processor_exits_fail_an_exit_is_a_failed_attempt_and_the_worker_serves_on(
    store: CountingStore, clock: FakeClock, exit_error: BaseException
) -> None:
    engine = make_engine(store, clock, concurrency=1, processor_exits="fail")

    @engine.processor("bad", max_attempts=1)
    async def bad(payload: Any, ctx: JobContext) -> None:
        raise exit_error

    @engine.processor("next")
    async def after(payload: Any, ctx: JobContext) -> str:
        return "ran"

    bad_id = (await engine.enqueue("bad", priority=1)).id
    next_id = (await engine.enqueue("next")).id
    assert await engine.worker().run_until_idle() == 2
    bad_job = await engine.get_job(bad_id)
    assert (bad_job.state, bad_job.attempts) == (JobState.DEAD, 1)
    assert (bad_job.last_error or "").startswith(type(exit_error).__name__)
    # The stored traceback starts at the processor, not in the worker's frames.
    _, _, details = (bad_job.last_error or "").partition("\n\n")
    assert details.splitlines()[1].endswith(", in bad")
    assert (await engine.get_job(next_id)).state is JobState.SUCCEEDED


# ---- a plain function that returns an awaitable ----------------------------------------


async def test_a_plain_function_returning_a_coroutine_is_a_failed_attempt(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    # The classic slip: a lambda around an async function. Its coroutine never runs.
    engine.processor("slip", max_attempts=1)(lambda payload: asyncio.sleep(0))

    job_id = (await engine.enqueue("slip")).id
    assert await engine.worker().run_until_idle() == 1
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.DEAD, 1)
    assert (job.last_error or "").startswith(
        "TypeError: processor for 'slip' is a plain function but returned coroutine"
    )


async def test_a_plain_function_annotated_to_return_an_awaitable_is_refused(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)

    def slip(payload: Any) -> asyncio.Future[None]:  # resolved: a Future is awaitable
        return asyncio.get_running_loop().create_future()

    def slip_later(payload: Any) -> Awaitable[None]:  # only a name at runtime
        return asyncio.sleep(0)

    for fn in (slip, slip_later):
        with pytest.raises(TypeError, match="plain function annotated to return an awaitable"):
            engine.processor("slip")(fn)
    assert "slip" not in engine.kinds
