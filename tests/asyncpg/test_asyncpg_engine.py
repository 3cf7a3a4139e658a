"""An AsyncEngine worker on the asyncpg store: the job's transaction (R10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings

if TYPE_CHECKING:
    from skiplock.adapters.asyncpg import AsyncpgJobStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _engine(store: AsyncpgJobStore) -> AsyncEngine:
    return AsyncEngine(store, Settings(poll_interval=0.05, backoff_base=60))


async def test_processor_write_and_completion_commit_together(
    store: AsyncpgJobStore, db: Any
) -> None:
    engine = _engine(store)

    @engine.processor("apg.write", transactional=True)
    async def write(payload: dict[str, Any], ctx: JobContext) -> None:
        assert ctx.connection.is_in_transaction()
        await ctx.connection.execute(
            "INSERT INTO public.effects VALUES ($1, $2)", ctx.job_id, payload["note"]
        )

    result = await engine.enqueue("apg.write", {"note": "done"})
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    assert await db.fetch("SELECT job_id, note FROM public.effects") == [(result.id, "done")]
    job = await store.get(result.id)
    assert job is not None
    assert job.state is JobState.SUCCEEDED


async def test_processor_failure_rolls_back_its_write_and_the_completion(
    store: AsyncpgJobStore, db: Any
) -> None:
    engine = _engine(store)

    @engine.processor("apg.write", transactional=True, max_attempts=3)
    async def write(payload: dict[str, Any], ctx: JobContext) -> None:
        await ctx.connection.execute("INSERT INTO public.effects VALUES ($1, 'x')", ctx.job_id)
        raise RuntimeError("failed after writing")

    result = await engine.enqueue("apg.write", {})
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    assert await db.fetch("SELECT * FROM public.effects") == []
    job = await store.get(result.id)
    assert job is not None
    assert job.state is JobState.PENDING  # a retry later, not a success
    assert job.attempts == 1
    assert job.last_error is not None
    assert "failed after writing" in job.last_error


async def test_processor_enqueues_a_follow_up_in_the_job_transaction(
    store: AsyncpgJobStore, db: Any
) -> None:
    engine = _engine(store)
    order: list[str] = []

    @engine.processor("apg.first", transactional=True)
    async def first(payload: Any, ctx: JobContext) -> None:
        order.append("first")
        await engine.enqueue("apg.second", connection=ctx.connection)

    @engine.processor("apg.second")
    async def second(payload: Any) -> None:
        order.append("second")

    await engine.enqueue("apg.first")
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 2
    assert order == ["first", "second"]
    assert await db.fetch("SELECT DISTINCT status FROM skiplock.jobs") == [("succeeded",)]


async def test_non_transactional_kind_gets_an_autocommit_connection(
    store: AsyncpgJobStore, db: Any
) -> None:
    engine = _engine(store)

    @engine.processor("apg.ddl", autocommit=True)
    async def ddl(payload: Any, ctx: JobContext) -> None:
        assert not ctx.connection.is_in_transaction()
        await ctx.connection.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS effects_note ON public.effects (note)"
        )

    await engine.enqueue("apg.ddl")
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    assert await db.fetch("SELECT status FROM skiplock.jobs") == [("succeeded",)]
    assert await db.fetch("SELECT 1 FROM pg_indexes WHERE indexname = 'effects_note'")
