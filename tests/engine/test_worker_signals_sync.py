"""The sync worker in the main thread sees stop signals the kernel delivered to another
thread (hand-written: the async worker's signals are its event loop's)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from skiplock import Engine, JobContext, JobState, Settings
from skiplock._compat import MAIN_THREAD_WAIT_SLICE, Event, ThreadSafeEvent, join, spawn, wait_event

from .helpers import CountingStore, eventually

if TYPE_CHECKING:
    from skiplock.testing import FakeClock


def test_a_second_stop_signal_delivered_to_another_thread_forces_the_stop(
    clock: FakeClock,
) -> None:
    # SIGTERM blocked in the main thread: the kernel delivers it to the sending thread,
    # which does not interrupt the main thread's wait for the running job. The 60 s drain
    # must still end at the second signal, not after its timeout.
    store = CountingStore(clock=clock)
    engine = Engine(store, Settings(shutdown_timeout=60.0, poll_interval=0.01), clock=clock)
    started = Event()

    @engine.processor("stuck")
    def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        never = Event()
        while not wait_event(never, 0.01):  # short waits: a sync interrupt can land
            pass

    job_id = engine.enqueue("stuck", {}).id
    worker = engine.worker(install_signal_handlers=True)

    def send() -> None:
        # Threads inherit the main thread's mask: this one takes the signals it sends.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        eventually(started.is_set)
        os.kill(os.getpid(), signal.SIGTERM)
        eventually(lambda: worker.state == "draining")
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        helper = spawn(send)
        begun = time.monotonic()
        worker.run()
        took = time.monotonic() - begun
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    join(helper)
    assert took < 30.0  # not the 60 s drain
    job = store.state.get(job_id)
    assert job is not None
    assert (job.state, job.attempts) == (JobState.PENDING, 0)  # released, no attempt used


def test_main_thread_waits_return_on_time_and_when_set() -> None:
    event = ThreadSafeEvent()
    begun = time.monotonic()
    assert not event.wait(3 * MAIN_THREAD_WAIT_SLICE)  # several slices, then False
    assert time.monotonic() - begun >= 3 * MAIN_THREAD_WAIT_SLICE
    setter = spawn(event.set)
    assert event.wait(None)
    join(setter)
    assert event.wait(0)


def test_a_forced_stop_releases_a_job_blocked_where_no_interruption_lands(
    clock: FakeClock,
) -> None:
    # Issue 41: a plain function blocked in C code (a lock wait, as a Django task's
    # socket read) ignores the interruption. Its job used to stay `running` until
    # stale-claim recovery; now it is released at once and the call is left behind.
    store = CountingStore(clock=clock)
    engine = Engine(store, Settings(shutdown_timeout=60.0, poll_interval=0.01), clock=clock)
    started, release = ThreadSafeEvent(), threading.Event()

    @engine.processor("stuck")
    def stuck(payload: Any, ctx: JobContext) -> str:
        started.set()
        release.wait()  # one C-level wait: the worker's interruption cannot land in it
        return "too late"

    job_id = engine.enqueue("stuck", {}).id
    baseline = threading.active_count()
    worker = engine.worker()
    runner = spawn(worker.run)
    eventually(started.is_set)
    worker.stop(force=True)
    join(runner)  # within the 1 s grace, not the 60 s drain
    job = store.state.get(job_id)
    assert job is not None
    assert (job.state, job.attempts, job.claimed_by) == (JobState.PENDING, 0, None)
    assert store.state.workers() == []
    # The call left behind ends later and writes nothing.
    release.set()
    eventually(lambda: threading.active_count() <= baseline)
    job = store.state.get(job_id)
    assert job is not None
    assert (job.state, job.attempts, job.result) == (JobState.PENDING, 0, None)
