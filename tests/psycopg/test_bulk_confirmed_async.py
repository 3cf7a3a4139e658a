"""Bulk actions bound to what an operator confirmed (issue 41, item 1; sync twin
generated), on the in-memory store and on PostgreSQL: ``act_as_confirmed`` and a bound
``retry_dead`` change exactly the confirmed jobs, refuse a selection that changed
(``SelectionChangedError``, the count now, nothing changed) and name the jobs skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    BulkResult,
    JobState,
    SelectionChangedError,
    Settings,
    SkippedJob,
    ValidationError,
)
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.adapters.psycopg import AsyncPsycopgJobStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    if request.param == "memory":
        store: Any = AsyncInMemoryJobStore()
    else:
        store = AsyncPsycopgJobStore(request.getfixturevalue("pg_dsn"), max_size=2)
    engine = AsyncEngine(store, Settings(audit=True))

    @engine.processor("hook.send", max_attempts=1)
    async def send(payload: Any) -> None:
        raise ConnectionError("refused")

    yield engine
    await store.close()


async def _dead(engine: AsyncEngine, count: int) -> list[int]:
    """``count`` new dead jobs (each failed its only attempt), by id."""
    ids = [(await engine.enqueue("hook.send", {"n": n})).id for n in range(count)]
    await engine.worker(kinds=["hook.send"]).run_until_idle()
    assert {(await engine.get_job(i)).state for i in ids} == {JobState.DEAD}
    return ids


async def test_act_as_confirmed_changes_exactly_the_confirmed_jobs(engine: AsyncEngine) -> None:
    a, b, c = await _dead(engine, 3)
    result = await engine.act_as_confirmed("discard", {a: "dead", b: JobState.DEAD})
    assert isinstance(result, BulkResult)
    assert (list(result), result.skipped) == ([a, b], ())
    assert [j.id for j in await engine.dead_jobs()] == [c]  # c was not confirmed
    trail = await engine.audit_trail(a)
    assert trail[-1].action.value == "job_discard"


async def test_a_confirmed_selection_that_changed_is_refused_and_changes_nothing(
    engine: AsyncEngine,
) -> None:
    a, b, c = await _dead(engine, 3)
    await engine.retry_job(b)  # another operator, after the confirmation was shown
    with pytest.raises(SelectionChangedError) as refused:
        await engine.act_as_confirmed("discard", {a: "dead", b: "dead", c: "dead"})
    assert (refused.value.count, refused.value.confirmed) == (2, 3)
    assert [j.id for j in await engine.dead_jobs()] == [a, c]  # nothing deleted
    with pytest.raises(SelectionChangedError):  # a job that no longer exists
        await engine.act_as_confirmed("retry", {a: "dead", 10**12: "dead"})
    assert [j.id for j in await engine.dead_jobs()] == [a, c]
    with pytest.raises(ValidationError, match="retry does not apply to pending jobs"):
        await engine.act_as_confirmed("retry", {b: "pending"})
    with pytest.raises(ValidationError, match="unknown job state"):
        await engine.act_as_confirmed("retry", {a: "buried"})
    with pytest.raises(ValidationError, match="at most 10000 jobs"):
        await engine.act_as_confirmed("retry", dict.fromkeys(range(1, 10_002), "dead"))


async def test_a_job_that_changes_while_the_action_runs_is_skipped_with_why(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = await _dead(engine, 3)
    store: Any = engine.store
    delete = store.delete

    async def racing_delete(*args: Any, **options: Any) -> Any:
        # Another operator replays b and discards c between the check and the change.
        monkeypatch.setattr(store, "delete", delete)
        await engine.retry_job(b)
        await engine.delete_job(c)
        return await delete(*args, **options)

    monkeypatch.setattr(store, "delete", racing_delete)
    result = await engine.act_as_confirmed("discard", dict.fromkeys([a, b, c], "dead"))
    assert list(result) == [a]
    assert result.skipped == (
        SkippedJob(b, JobState.PENDING, "it is pending now, not dead"),
        SkippedJob(c, None, "it no longer exists"),
    )
    assert (await engine.get_job(b)).state is JobState.PENDING  # replayed, not deleted


async def test_a_bound_retry_dead_takes_only_what_was_confirmed(engine: AsyncEngine) -> None:
    a, b, c = await _dead(engine, 3)
    # Confirmed: "replay 3 dead jobs" (up to c). A fourth dies meanwhile: left alone.
    [d] = await _dead(engine, 1)
    result = await engine.retry_dead(through=c, expected=3, reset_attempts=False)
    assert (list(result), result.skipped) == ([a, b, c], ())
    assert [j.id for j in await engine.dead_jobs()] == [d]
    assert (await engine.get_job(a)).attempts == 1  # kept
    # Confirmed: 1 dead job up to d; one of the replayed ones died again meanwhile.
    await engine.worker(kinds=["hook.send"]).run_until_idle()
    with pytest.raises(SelectionChangedError) as refused:
        await engine.retry_dead(through=d, expected=1)
    assert (refused.value.count, refused.value.confirmed) == (4, 1)
    assert len(await engine.dead_jobs()) == 4  # nothing replayed
    assert await engine.retry_dead(kind="other.kind", through=d, expected=0) == []
    assert len(await engine.retry_dead()) == 4  # unbound: every dead job, as before
