"""Contract tests of what a job's runs leave behind, through an engine's worker (async
source; ``_results_engine.py`` is its generated twin).

What a processor returns, a transactional processor's result, the failed attempts of a
job the worker retries or buries, over the store under test. Part of
:class:`~._results_async.AsyncResultsContract`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from skiplock import core
from skiplock.engine import AsyncEngine, JobContext, Settings

from . import _support_async as kit
from ._results_port_async import (
    _ENGINE_WORKER,
    _RESULT,
    AsyncResultsAudits,
    _actions,
    _between,
    _expected,
    _numbers,
)

if TYPE_CHECKING:
    from skiplock.ports import AsyncAudit, AsyncJobStore


@attrs.frozen
class _Report:
    """A typed return value: stored as its JSON form, like a typed payload."""

    total: int
    tags: tuple[str, ...]


def _normalised(value: object) -> Any:
    return json.loads(json.dumps(value))


def _engine(store: AsyncJobStore, audit: AsyncAudit | None, **settings: Any) -> AsyncEngine:
    """An engine auditing as ``audit`` says (off, its table, or the sink)."""
    # No backoff: a failed attempt is due again at once, so one run_until_idle() runs
    # every attempt of a job.
    options = Settings(
        backoff_base=0,
        backoff_jitter=0,
        audit=audit is not None and audit.sink is None,
        **settings,
    )
    return AsyncEngine(store, options, audit_sink=None if audit is None else audit.sink)


async def _run(engine: AsyncEngine) -> int:
    worker = engine.worker(worker_id=_ENGINE_WORKER, install_signal_handlers=False)
    return await worker.run_until_idle()


class AsyncResultsEngineContract(AsyncResultsAudits):
    """Results and failed attempts of jobs an engine's worker runs."""

    # ---- through an engine's worker ---------------------------------------------------

    async def test_engine_stores_what_processors_return(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit)
        returns: dict[str, Any] = {
            "results.data": _RESULT,
            "results.typed": _Report(total=2, tags=("a", "b")),
            "results.text": "plain text",
            "results.none": None,
        }
        for kind, value in returns.items():

            @engine.processor(kind)
            async def give(payload: Any, ctx: JobContext, value: Any = value) -> Any:
                return value

        ids = {kind: (await engine.enqueue(kind, {})).id for kind in returns}
        assert await _run(engine) == len(returns)
        stored = {kind: (await engine.get_job(job_id)).result for kind, job_id in ids.items()}
        assert stored == {
            "results.data": _normalised(_RESULT),
            "results.typed": {"total": 2, "tags": ["a", "b"]},
            "results.text": "plain text",
            "results.none": None,
        }

    async def test_engine_records_failed_attempts_then_the_success(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit)
        runs: list[int] = []

        @engine.processor("results.flaky", max_attempts=5)
        async def flaky(payload: Any, ctx: JobContext) -> dict[str, int]:
            runs.append(ctx.attempt)
            if len(runs) < 3:
                raise RuntimeError(f"flaky failure {len(runs)}")
            return {"attempt": ctx.attempt}

        before = await store.now()
        job_id = (await engine.enqueue("results.flaky", {})).id
        await _run(engine)
        after = await store.now()
        job = await engine.get_job(job_id)
        assert (job.state, job.attempts, job.result) == (core.JobState.SUCCEEDED, 3, {"attempt": 3})
        assert _numbers(job.errors) == [1, 2]
        for n, entry in enumerate(job.errors, start=1):
            assert entry.error.startswith(f"RuntimeError: flaky failure {n}")
            assert _between(entry.failed_at, before, after)
        assert job.worker_ids == (_ENGINE_WORKER,) * 3
        assert _between(job.started_at, before, after)
        assert _between(job.completed_at, before, after)
        assert await _actions(store, audit, job_id) == _expected(
            audit, core.AuditAction.ENQUEUED, core.AuditAction.DONE
        )

    async def test_engine_records_the_failures_of_a_dead_job(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit)
        attempts = core.MAX_RECORDED_ERRORS + 2

        @engine.processor("results.doomed", max_attempts=attempts)
        async def doomed(payload: Any, ctx: JobContext) -> None:
            raise ValueError(f"doomed run {ctx.attempt}")

        job_id = (await engine.enqueue("results.doomed", {})).id
        await _run(engine)
        job = await engine.get_job(job_id)
        assert (job.state, job.attempts, job.result) == (core.JobState.DEAD, attempts, None)
        assert _numbers(job.errors) == list(range(3, attempts + 1))
        assert all(e.error.startswith(f"ValueError: doomed run {e.attempt}") for e in job.errors)
        assert job.completed_at is not None
        assert await _actions(store, audit, job_id) == _expected(
            audit, core.AuditAction.ENQUEUED, core.AuditAction.DLQ
        )

    @kit.requires("transactions")
    async def test_engine_stores_a_transactional_processors_result(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit)
        runs: list[int] = []

        @engine.processor("results.booked", transactional=True, max_attempts=3)
        async def book(payload: Any, ctx: JobContext) -> dict[str, Any]:
            assert ctx.connection is not None
            runs.append(ctx.attempt)
            if len(runs) == 1:
                raise RuntimeError("first booking failed")
            return {"booked": payload["invoice"]}

        job_id = (await engine.enqueue("results.booked", {"invoice": 17})).id
        await _run(engine)
        job = await engine.get_job(job_id)
        assert (job.state, job.attempts, job.result) == (core.JobState.SUCCEEDED, 2, {"booked": 17})
        assert [(e.attempt, e.error.partition("\n")[0]) for e in job.errors] == [
            (1, "RuntimeError: first booking failed")
        ]

    async def test_engine_buries_a_result_it_cannot_store(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit, max_result_bytes=100)
        returns: dict[str, Any] = {
            "results.set": {1, 2},
            "results.nan": {"x": float("nan")},
            "results.large": "x" * 200,
        }
        for kind, value in returns.items():

            @engine.processor(kind, max_attempts=3)
            async def give(payload: Any, ctx: JobContext, value: Any = value) -> Any:
                return value

        ids = {kind: (await engine.enqueue(kind, {})).id for kind in returns}
        await _run(engine)
        errors: dict[str, str | None] = {}
        for kind, job_id in ids.items():
            job = await engine.get_job(job_id)
            # Not retried: the same code would return the same kind of value again.
            assert (job.state, job.attempts, job.result) == (core.JobState.DEAD, 1, None)
            assert [e.error for e in job.errors] == [job.last_error]
            errors[kind] = job.last_error
        expected = {
            "results.set": "unstorable result: result is not JSON-serialisable: "
            "object of type 'set'",
            # The rest is the json module's message.
            "results.nan": "unstorable result: result is not valid JSON: ",
            "results.large": "unstorable result: result too large: 202 bytes encoded, "
            "the limit is 100 bytes",
        }
        for kind, start in expected.items():
            assert (errors[kind] or "").startswith(start), (kind, errors[kind])

    @kit.requires("transactions")
    async def test_engine_buries_an_unstorable_transactional_result_and_rolls_back(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        engine = _engine(store, audit)

        @engine.processor("results.follow_up")
        async def follow_up(payload: Any, ctx: JobContext) -> None: ...

        @engine.processor("results.tx_set", transactional=True, max_attempts=3)
        async def give(payload: Any, ctx: JobContext) -> Any:
            # Written in the job's transaction, which the unstorable result rolls back.
            await engine.enqueue("results.follow_up", {}, connection=ctx.connection)
            return {3, 4}

        job_id = (await engine.enqueue("results.tx_set", {})).id
        assert await _run(engine) == 1
        job = await engine.get_job(job_id)
        assert (job.state, job.attempts) == (core.JobState.DEAD, 1)
        assert job.last_error is not None
        assert job.last_error.startswith("unstorable result: result is not JSON-serialisable")
        assert await engine.list_jobs(kind="results.follow_up") == []
        assert await _actions(store, audit, job_id) == _expected(
            audit, core.AuditAction.ENQUEUED, core.AuditAction.DLQ
        )
