"""Helpers of the tests that run worker processes against a real server: a deadline wait,
the process launcher, stop with SIGTERM; plain SQL and enqueue through psycopg.

Imported as ``tests.pghelpers`` (pytest's ``pythonpath`` puts the repository root on
``sys.path``; its importlib import mode keeps ``tests/`` itself off it, so that the
driver-named folders ``tests/psycopg`` and ``tests/asyncpg`` cannot shadow the
drivers). psycopg is imported only by the functions
that use it: tox's asyncpg env has no psycopg, and its process tests use the rest.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

    from skiplock.core import EnqueueRequest


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on its own autocommit connection (psycopg); its rows, if any."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def enqueue(dsn: str, requests: list[EnqueueRequest]) -> list[int]:
    """Create jobs through the psycopg store; their ids in request order."""
    from skiplock.adapters.psycopg import PsycopgJobStore

    with PsycopgJobStore(dsn) as store:
        return [r.id for r in store.enqueue(requests)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker process and expect a clean exit."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0


@contextlib.contextmanager
def worker_processes(
    folder: Path, module: str, source: str
) -> Iterator[Callable[[Mapping[str, str], str], subprocess.Popen[bytes]]]:
    """Write the app ``module`` into ``folder``; yield ``start(env, log_level)``, which runs
    ``skiplock worker <module>:engine`` there with ``env`` added to the environment (its
    output in ``worker<n>.log``). At the end every process left is killed (a frozen one is
    continued first) and logs with a traceback are printed."""
    (folder / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    procs: list[subprocess.Popen[bytes]] = []

    def start(env: Mapping[str, str], log_level: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "skiplock", "worker", f"{module}:engine"]
        with open(folder / f"worker{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [*command, "--log-level", log_level],
                cwd=folder,
                env=os.environ | dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a frozen one cannot die otherwise
                proc.kill()
                proc.wait(10)
        for log in sorted(folder.glob("worker*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                print(f"--- {log.name}\n{text}")


def zone_with_daylight_saving_in_two_days() -> str:
    """A POSIX time zone (for ``SET TimeZone``) whose clocks go forward an hour two days
    from now (UTC): a duration added as calendar days across it is an hour short."""
    return _zone_with_daylight_saving_from(2)


def zone_with_daylight_saving_since_two_days() -> str:
    """A POSIX time zone whose clocks went forward an hour two days ago (UTC): a
    duration subtracted from now as calendar days across it is an hour short."""
    return _zone_with_daylight_saving_from(-2)


def _zone_with_daylight_saving_from(days: int) -> str:
    # Daylight saving time (one hour ahead of UTC) from ``days`` after today for a
    # hundred days; standard time is UTC.
    today = datetime.now(UTC).date()
    day = today.timetuple().tm_yday
    if calendar.isleap(today.year) and today.month > 2:
        day -= 1  # POSIX Jn days never count February 29
    start = (day + days - 1) % 365 + 1
    end = (start + 99) % 365 + 1
    return f"AAA0BBB,J{start}/0,J{end}/0"


def deferred_reference_table(dsn: str) -> str:
    """Create a table whose rows reference it with a deferred foreign key, so an insert of
    ``(1, 2)`` fails only at COMMIT; its name (drop it when done)."""
    table = f"deferred_{uuid.uuid4().hex[:8]}"
    sql(
        dsn,
        f"CREATE TABLE {table} (id int PRIMARY KEY, "
        f"parent int REFERENCES {table} DEFERRABLE INITIALLY DEFERRED)",
    )
    return table
