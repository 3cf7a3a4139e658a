"""Helpers of the ``skiplock health`` and admin command tests: jobs and worker rows made
on PostgreSQL, a terminal stand-in, a closed port, the command in a subprocess."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tests.pgfixtures import execute, fetch

if TYPE_CHECKING:
    from collections.abc import Iterator

    from skiplock import Engine

#: A subprocess still running by then fails its test.
DEADLINE = 20.0


@contextmanager
def engine_on(dsn: str) -> Iterator[Engine]:
    """A sync engine on ``dsn`` (any kind accepted), closed afterwards."""
    from skiplock import Engine
    from skiplock.adapters.psycopg import PsycopgJobStore

    store = PsycopgJobStore(dsn, max_size=2)
    try:
        yield Engine(store)
    finally:
        store.close()


def enqueue(dsn: str, kind: str, count: int = 1, **options: Any) -> list[int]:
    """``count`` jobs of ``kind``; their ids."""
    with engine_on(dsn) as engine:
        return [engine.enqueue(kind, {"n": n}, **options).id for n in range(count)]


def bury(dsn: str, *ids: int, error: str = "boom") -> None:
    """Make jobs dead with ``error`` (as a worker that gave up would)."""
    listed = ", ".join(str(int(job_id)) for job_id in ids)
    execute(
        dsn,
        [
            "UPDATE skiplock.jobs SET status = 'dead', attempts = max_attempts, "
            f"completed_at = now(), last_error = '{error}' WHERE id IN ({listed})"
        ],
    )


def strand(dsn: str, job_id: int, worker_id: str, seconds: int) -> None:
    """Leave job ``job_id`` running under ``worker_id``, claimed ``seconds`` ago."""
    execute(
        dsn,
        [
            "UPDATE skiplock.jobs SET status = 'running', attempts = 1, "
            f"claimed_by = '{worker_id}', claimed_at = now() - interval '{seconds} seconds' "
            f"WHERE id = {int(job_id)}"
        ],
    )


def add_worker(
    dsn: str,
    worker_id: str,
    *kinds: str,
    silent_for: int = 0,
    tenants: tuple[str, ...] | None = None,
) -> None:
    """A worker row as a running worker registers it, its last heartbeat ``silent_for``
    seconds ago (no kinds: every kind)."""

    def array(values: tuple[str, ...] | None) -> str:
        if not values:
            return "NULL"
        return "ARRAY[" + ", ".join(f"'{v}'" for v in values) + "]"

    execute(
        dsn,
        [
            "INSERT INTO skiplock.workers (id, host, pid, kinds, tenants, heartbeat_at) "
            f"VALUES ('{worker_id}', 'host-1', 4242, {array(kinds)}, {array(tenants)}, "
            f"now() - interval '{int(silent_for)} seconds')"
        ],
    )


def job_states(dsn: str) -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in fetch(dsn, "SELECT id, status FROM skiplock.jobs")}


def closed_port() -> int:
    """A local port nothing listens on (bound to get a free one, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Terminal(io.StringIO):
    """A stdin that is a terminal and answers with ``text``."""

    def isatty(self) -> bool:
        return True


def run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m skiplock ARGV`` in a subprocess (stdin not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *argv],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def parse(text: str) -> Any:
    """The JSON a command printed."""
    return json.loads(text)
