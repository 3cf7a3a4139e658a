"""``skiplock worker`` runs an async engine's worker on uvloop where it is installed (the
psycopg env installs the ``uvloop`` extra; the noextras env, without it, runs tests/cli on
asyncio's loop), and on asyncio's own with ``SKIPLOCK_EVENT_LOOP=asyncio``: a real worker
process over the async psycopg store, whose processor returns the loop it ran on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.postgres

_APP = """
import asyncio
import os

from skiplock import AsyncEngine
from skiplock.adapters.psycopg import AsyncPsycopgJobStore

engine = AsyncEngine(AsyncPsycopgJobStore(os.environ["SKIPLOCK_TEST_APP_DSN"]))


@engine.processor("loop.which")
async def which(payload, ctx):
    return type(asyncio.get_running_loop()).__module__
"""


@pytest.mark.parametrize(
    ("setting", "module", "named"),
    [("auto", "uvloop", "uvloop "), ("asyncio", "asyncio.unix_events", "asyncio")],
)
def test_worker_runs_on_the_event_loop_the_setting_picks(
    tmp_path: Path, pg_dsn: str, setting: str, module: str, named: str
) -> None:
    (tmp_path / "loop_app.py").write_text(textwrap.dedent(_APP), encoding="utf-8")
    producer = Engine(PsycopgJobStore(pg_dsn))
    producer.declare_kind("loop.which")
    try:
        job = producer.enqueue("loop.which", {})
        done = subprocess.run(
            [sys.executable, "-m", "skiplock", "worker", "loop_app:engine", "--until-idle"],
            cwd=tmp_path,
            env=os.environ | {"SKIPLOCK_TEST_APP_DSN": pg_dsn, "SKIPLOCK_EVENT_LOOP": setting},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "handled 1 job(s)\n"
        assert f"runs on the {named}" in done.stderr
        ran = producer.get_job(job.id)
        assert ran is not None
        assert ran.result == module
    finally:
        producer.store.close()
