"""A worker facing a hung database (issue 41, item 2): the server stops answering on
every connection, the open ones included, then answers again (``tests.blackhole``
relaying to the test server, as a stopped and continued server would). The worker's
lease is in doubt meanwhile: it starts and claims nothing, and its own maintenance does
not take its running job for stale. Once the server answers, it renews its lease, writes
the job's outcome (one attempt, one run) and serves the queue again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from tests.blackhole import Blackhole
from tests.pghelpers import sql

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SETTINGS = Settings(
    concurrency=2,
    poll_interval=0.1,
    heartbeat_interval=0.2,
    stale_ttl=1.0,
    maintenance_interval=0.3,
    shutdown_timeout=5.0,
)
#: Generous bound on every wait for a condition (a loaded machine is slow).
WAIT = 30.0


async def until(check: Callable[[], Awaitable[bool] | bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        outcome = check()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def through(proxy: Blackhole, dsn: str) -> str:
    """``dsn`` with its host and port those of ``proxy``."""
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=str(proxy.port), connect_timeout="2")
    return make_conninfo(**params)  # type: ignore[arg-type]


def state_of(dsn: str, job_id: int) -> tuple[str, int]:
    [(state, attempts)] = sql(
        dsn, "SELECT status, attempts FROM skiplock.jobs WHERE id = %s", job_id
    )
    return str(state), int(attempts)


async def test_a_worker_keeps_its_lease_in_doubt_and_recovers_when_the_server_answers(
    pg_dsn: str,
) -> None:
    params = conninfo_to_dict(pg_dsn)
    upstream = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    runs: list[tuple[int, int]] = []
    release = asyncio.Event()
    with Blackhole(upstream=upstream) as proxy:
        store = AsyncPsycopgJobStore(through(proxy, pg_dsn))
        engine = AsyncEngine(store, SETTINGS)

        @engine.processor("hold")
        async def hold(payload: Any, ctx: JobContext) -> None:
            runs.append((ctx.job_id, ctx.attempt))
            await release.wait()

        @engine.processor("quick")
        async def quick(payload: Any, ctx: JobContext) -> None:
            runs.append((ctx.job_id, ctx.attempt))

        direct = AsyncEngine(AsyncPsycopgJobStore(pg_dsn))  # the server itself, no proxy
        direct.declare_kind("hold")
        direct.declare_kind("quick")
        try:
            worker = engine.worker()
            async with worker.in_background():
                try:
                    await scenario(proxy, worker, direct, pg_dsn, runs, release)
                finally:  # the worker can only stop once the server answers
                    release.set()
                    proxy.forward()
        finally:
            release.set()
            await store.close()
            await direct.store.close()


async def scenario(
    proxy: Blackhole,
    worker: Any,
    direct: AsyncEngine,
    pg_dsn: str,
    runs: list[tuple[int, int]],
    release: asyncio.Event,
) -> None:
    first = (await direct.enqueue("hold", {})).id
    await until(lambda: bool(runs), "the first job to start")

    proxy.hang()
    lease = worker._lease  # what the worker itself consults before a claim
    await until(lease.in_doubt, "the lease to be in doubt")
    second = (await direct.enqueue("quick", {})).id
    release.set()  # the first job ends while nothing can be written
    # A poll interval is 0.1 s, a maintenance pass 0.3 s, the stale TTL 1 s:
    # over 1.5 s of the hang nothing may claim, nor take the first job.
    await asyncio.sleep(1.5)
    assert lease.in_doubt()
    assert runs == [(first, 1)]
    assert state_of(pg_dsn, first) == ("running", 1)
    assert state_of(pg_dsn, second) == ("pending", 0)

    proxy.forward()
    await until(lambda: not lease.in_doubt(), "the lease to be renewed")
    await until(lambda: state_of(pg_dsn, second)[0] == "succeeded", "the second job to run")
    assert state_of(pg_dsn, first) == ("succeeded", 1)
    assert runs == [(first, 1), (second, 1)]
