"""Helpers of the tests that run worker processes against a real server: plain SQL, a
deadline wait, enqueue through a store, stop with SIGTERM."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

import psycopg

from skiplock.adapters.psycopg import PsycopgJobStore

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

    from skiplock.core import EnqueueRequest


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on its own autocommit connection; its rows, if any."""
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
    """Create jobs through the store; their ids in request order."""
    with PsycopgJobStore(dsn) as store:
        return [r.id for r in store.enqueue(requests)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker process and expect a clean exit."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0
