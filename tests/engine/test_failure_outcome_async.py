"""One rule, once (sync twin generated): what a worker writes for a failed attempt is
the decision ``ctx.failure_outcome`` gave the processor, and its ``final`` is what the
store then holds; what a claim charged is what the worker ran."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobCancelledError, JobContext, JobState, Settings
from skiplock.core import Bury, Outcome, Release, Retry, Succeeded

from .helpers_async import CountingStore

if TYPE_CHECKING:
    from skiplock.core import ClaimRequest
    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncAudit
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def test_each_outcome_says_whether_it_is_final() -> None:
    outcomes: list[tuple[Outcome, bool]] = [
        (Succeeded(), True),
        (Bury(error="x"), True),
        (Retry(delay=timedelta(seconds=1), error="x"), False),
        (Release(), False),
    ]
    assert [o.final for o, _ in outcomes] == [final for _, final in outcomes]


@pytest.mark.parametrize("error", [ValueError("boom"), JobCancelledError("by itself")])
async def test_the_outcome_a_processor_is_told_is_the_one_written(
    store: CountingStore, clock: FakeClock, error: Exception
) -> None:
    # A processor that raises JobCancelledError itself (not a shutdown) fails its
    # attempt like any error: a rule of its own would say "released".
    engine = AsyncEngine(store, Settings(poll_interval=0.01), clock=clock)
    told: list[Outcome] = []
    again: list[Outcome] = []

    @engine.processor("flaky", max_attempts=2, backoff_base=timedelta(hours=1))
    async def flaky(payload: Any, ctx: JobContext) -> None:
        try:
            raise error
        except Exception as exc:
            told.append(ctx.failure_outcome(exc))
            again.append(ctx.failure_outcome(exc))  # decided once: the same object
            raise

    job_id = (await engine.enqueue("flaky")).id
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    first = await engine.get_job(job_id)
    [retry] = told
    assert isinstance(retry, Retry)
    assert not retry.final
    assert first.state is JobState.PENDING
    assert first.last_error == retry.error
    # The delay written is the one decided (jitter drawn once).
    assert first.available_at == first.errors[-1].failed_at + retry.delay
    clock.advance(timedelta(hours=2))
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    bury = told[-1]
    assert isinstance(bury, Bury)
    assert bury.final
    assert [a is t for a, t in zip(again, told, strict=True)] == [True, True]
    second = await engine.get_job(job_id)
    assert (second.state, second.last_error) == (JobState.DEAD, bury.error)


async def test_outside_a_worker_there_is_no_failure_outcome(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = AsyncEngine(store, clock=clock)
    job_id = (await engine.enqueue("k")).id
    ctx = JobContext(await engine.get_job(job_id), "w", cancel=_NeverCancelled())
    with pytest.raises(RuntimeError, match="not run by a worker"):
        ctx.failure_outcome(ValueError())


class _NeverCancelled:
    error = None


class _MisreportingStore(CountingStore):
    """Charges as the claim says but reports the first job it charged as held: a worker
    that re-derived the charges would run it as charged anyway."""

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        jobs = await super().claim(request, audit=audit)
        if jobs.charged:
            jobs.charged = jobs.charged - {min(jobs.charged)}
        return jobs


async def test_the_worker_runs_what_the_claim_says_it_charged(clock: FakeClock) -> None:
    store = _MisreportingStore(clock=clock)
    engine = AsyncEngine(store, Settings(poll_interval=0.01), clock=clock)
    attempts: list[int] = []

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        attempts.append(ctx.attempt)

    job_id = (await engine.enqueue("k")).id
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    assert await worker.run_until_idle() == 1
    # The worker believes the report: held, the job ran as a held job, whose context
    # counts one attempt more than the claim's (the store paid once; the outcome pays
    # nothing more). A worker deciding again by the rule would have seen attempt 1.
    assert attempts == [2]
    assert (await engine.get_job(job_id)).attempts == 1


@pytest.mark.parametrize("claim_errors", [True, False])
async def test_claim_errors_gives_processors_the_earlier_attempts_errors(
    store: CountingStore, clock: FakeClock, claim_errors: bool
) -> None:
    # Engine(claim_errors=True): its workers' claims ask for the jobs' recorded errors
    # (ClaimRequest.with_errors), which the processor reads on ctx.job, as get reads
    # them. By default a claim does not ask, and ctx.job has none.
    engine = AsyncEngine(
        store, Settings(poll_interval=0.01), clock=clock, claim_errors=claim_errors
    )
    seen: list[list[str]] = []

    @engine.processor("flaky", max_attempts=3, backoff_base=timedelta(hours=1))
    async def flaky(payload: Any, ctx: JobContext) -> None:
        seen.append([e.error for e in ctx.job.errors])
        if ctx.attempt < 3:
            raise ValueError(f"run {ctx.attempt}")

    job_id = (await engine.enqueue("flaky")).id
    for _ in range(3):
        assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
        assert store.last_request is not None
        assert store.last_request.with_errors is claim_errors
        clock.advance(timedelta(days=1))  # past the backoff
    stored = [e.error for e in (await engine.get_job(job_id)).errors]
    assert len(stored) == 2
    assert seen == ([[], stored[:1], stored] if claim_errors else [[], [], []])
