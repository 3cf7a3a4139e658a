"""A worker frozen (SIGSTOP, a paused VM) while a claim is in flight, on the in-memory
store: the claim runs only after maintenance deleted the silent worker's row, so nothing
keeps its jobs from being taken back while they run — the worker must not start them (the
sync twin ``test_worker_freeze.py`` is generated)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import join, spawn
from skiplock.engine.worker import _lease_async

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from skiplock.core import ClaimRequest
    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncAudit
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


class FrozenMonotonic:
    """``time`` for the lease keeper: its monotonic clock jumps by :attr:`frozen`."""

    def __init__(self) -> None:
        self.frozen = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.frozen


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> FrozenMonotonic:
    clock = FrozenMonotonic()
    monkeypatch.setattr(_lease_async, "time", clock)
    return clock


class FreezingClaimStore(CountingStore):
    """When armed, its next claim stands for one the worker sent after a freeze: the
    worker's row is gone first (as ``delete_silent_workers`` leaves it) and the worker's
    monotonic clock has jumped past the freeze by the time the claim returns."""

    def __init__(self, *args: Any, frozen: FrozenMonotonic, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed = False
        self._frozen = frozen

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        if self.armed:
            self.armed = False
            await self.unregister_worker(request.worker_id)  # maintenance, in the freeze
            self._frozen.frozen += 3600.0  # the freeze itself, far past the doubt threshold
        return await super().claim(request, audit=audit)


async def test_a_job_claimed_across_a_freeze_after_the_registration_went_is_not_run_twice(
    clock: FakeClock, frozen: FrozenMonotonic
) -> None:
    # Before the fix the claimed job started at once under the gone registration and the
    # renewal that followed (registering again) released it under its processor: a second
    # attempt here, a second run of the processor in the fault suite's freeze.
    store = FreezingClaimStore(clock=clock, frozen=frozen)
    engine = AsyncEngine(store, Settings(poll_interval=0.01, heartbeat_interval=60.0), clock=clock)
    runs: list[tuple[int, int]] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        runs.append((payload, ctx.attempt))

    job_id = (await engine.enqueue("job", 1)).id
    store.armed = True  # the worker's first claim
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: store.state.get(job_id).state is JobState.SUCCEEDED)  # type: ignore[union-attr]
    worker.stop()
    await join(task)
    # The claim that came back with the lease in doubt released its job unrun (its attempt
    # given back); the worker renewed (registering again) and claimed it afresh: one run.
    assert runs == [(1, 1)]
    final = store.state.get(job_id)
    assert final is not None
    assert (final.attempts, final.claims) == (1, 2)
