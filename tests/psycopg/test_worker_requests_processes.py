"""Drain a live worker process on a real server (issue 45 item 5): ``skiplock
drain-worker`` run from this process reaches a ``python -m skiplock worker`` subprocess
through the database; the worker finishes the job it runs (well past its
``shutdown_timeout``), starts nothing more, and exits 0."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from skiplock import cli
from skiplock.core import EnqueueRequest
from tests.pghelpers import enqueue, sql, wait_for, worker_processes

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_APP = """
import os
import time

from skiplock import Engine, Settings
from skiplock.adapters.psycopg import PsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]
engine = Engine(
    PsycopgJobStore(DSN, max_size=4),
    # One slot, busy with the slow job: a job enqueued after the drain request can at
    # most be prefetched before the worker reads the request (within controls_refresh),
    # and a drain gives prefetched jobs back; with a free slot it could start at once.
    Settings(concurrency=1, poll_interval=0.2, controls_refresh=0.2, shutdown_timeout=0.5),
)


@engine.processor("drain.slow")
def slow(payload):
    # Longer than shutdown_timeout: a drain lets it finish, a stop would not.
    time.sleep(payload["seconds"])
"""

DEADLINE = 20.0


def test_a_drained_worker_process_finishes_its_job_and_exits(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with worker_processes(tmp_path, "skiplock_pg_drain_app", _APP) as start:
        proc = start({"SKIPLOCK_TEST_APP_DSN": pg_dsn}, "WARNING")
        [job_id] = enqueue(pg_dsn, [EnqueueRequest(kind="drain.slow", payload={"seconds": 2})])

        def running() -> bool:
            rows = sql(pg_dsn, "SELECT status FROM skiplock.jobs WHERE id = %s", job_id)
            return rows == [("running",)]

        wait_for(running, DEADLINE, "the job to start")
        [(worker_id, slots)] = sql(pg_dsn, "SELECT id, slots FROM skiplock.workers")
        assert slots == 1
        asked = time.monotonic()
        assert cli.main(["drain-worker", worker_id, "--dsn", pg_dsn, "--actor", "ops"]) == 0
        assert f"asked worker {worker_id} to drain" in capsys.readouterr().out
        # Enqueued after the request: a draining worker starts nothing more.
        [later] = enqueue(pg_dsn, [EnqueueRequest(kind="drain.slow", payload={"seconds": 0})])
        assert proc.wait(DEADLINE) == 0
        assert time.monotonic() - asked > 0.5  # it waited for the job, past shutdown_timeout
        states = dict(sql(pg_dsn, "SELECT id, status FROM skiplock.jobs"))
        assert states == {job_id: "succeeded", later: "pending"}
        assert sql(pg_dsn, "SELECT id FROM skiplock.workers") == []
        audited = sql(pg_dsn, "SELECT action, actor FROM skiplock.audit WHERE job_id IS NULL")
        assert audited == [("worker_drain", "ops")]
