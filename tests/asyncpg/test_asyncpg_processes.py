"""A ``skiplock worker`` process on the asyncpg store: a processor that exits the process
(issue 9). The psycopg twins of these tests are in tests/psycopg/test_processes.py."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore
from skiplock.core import EnqueueRequest
from tests.pghelpers import worker_processes

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_APP = """
import asyncio
import os
import sys

from skiplock import AsyncEngine, Settings
from skiplock.adapters.asyncpg import AsyncpgJobStore

settings = Settings(concurrency=8, poll_interval=1.0, shutdown_timeout=5.0)
engine = AsyncEngine(AsyncpgJobStore(os.environ["SKIPLOCK_TEST_APP_DSN"]), settings)


@engine.processor("proc.nap", transactional=True)
async def nap(payload, ctx):
    await ctx.connection.execute("INSERT INTO public.effects VALUES ($1, 'started')", ctx.job_id)
    await asyncio.sleep(0.3)


@engine.processor("proc.exit")
async def leave(payload, ctx):
    sys.exit(3)
"""


def _fetch(dsn: str, query: str) -> list[Any]:
    async def fetch() -> list[Any]:
        conn = await asyncpg.connect(dsn)
        try:
            return list(await conn.fetch(query))
        finally:
            await conn.close()

    return asyncio.run(fetch())


def test_sys_exit_in_a_processor_fails_its_job_and_stops_the_worker_cleanly(
    tmp_path: Path, apg_dsn: str
) -> None:
    async def enqueue() -> tuple[int, list[int]]:
        async with AsyncpgJobStore(apg_dsn) as store:
            leaver = EnqueueRequest(
                kind="proc.exit", priority=1, max_attempts=1, explicit_max_attempts=True
            )
            [bad] = await store.enqueue([leaver])
            others = await store.enqueue([EnqueueRequest(kind="proc.nap") for _ in range(40)])
        return bad.id, [job.id for job in others]

    bad_id, others = asyncio.run(enqueue())
    with worker_processes(tmp_path, "skiplock_apg_exit_app", _APP) as start:
        worker = start({"SKIPLOCK_TEST_APP_DSN": apg_dsn}, "WARNING")
        assert worker.wait(30) == 3
    jobs = {
        row["id"]: row
        for row in _fetch(
            apg_dsn,
            "SELECT id, status, attempts, claims, claimed_by, last_error FROM skiplock.jobs",
        )
    }
    assert [row["id"] for row in jobs.values() if row["status"] == "running"] == []
    assert (jobs[bad_id]["status"], jobs[bad_id]["attempts"]) == ("dead", 1)
    assert jobs[bad_id]["last_error"].startswith("SystemExit: 3")
    # A nap job that started committed its effect with its success (R10).
    ran = {row["job_id"] for row in _fetch(apg_dsn, "SELECT job_id FROM public.effects")}
    assert ran
    for job_id in others:
        row = jobs[job_id]
        if job_id in ran:
            assert (row["status"], row["attempts"]) == ("succeeded", 1)
        else:  # never finished, so never started (a graceful stop): nothing paid
            assert (row["status"], row["attempts"], row["claimed_by"]) == ("pending", 0, None)
    assert any(jobs[i]["claims"] > 0 for i in others if i not in ran)  # held, released
    assert _fetch(apg_dsn, "SELECT count(*) FROM skiplock.workers")[0][0] == 0
