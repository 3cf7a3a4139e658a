"""Fixtures of the asyncpg integration tests: scratch databases, through asyncpg only.

The server comes from ``SKIPLOCK_TEST_DSN`` (a URL; default: local, user postgres). Every
database gets a random name and is dropped afterwards. An unreachable server makes the
tests fail, never skip. No psycopg here (tox's asyncpg env installs only asyncpg), and no
``__init__.py``: this folder's name would shadow the ``asyncpg`` package.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import urllib.parse
import uuid
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore, apply_schema

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine, Iterator

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TABLES = ("jobs", "workers", "audit", "jobs_archive", "maintenance")


def _dsn_for(name: str) -> str:
    base = os.environ.get("SKIPLOCK_TEST_DSN", DEFAULT_DSN)
    return urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()


async def _script(dsn: str, statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statements)
    finally:
        await conn.close()


def _blocking(coro: Coroutine[Any, Any, Any]) -> None:
    # Sync fixtures may run while the test's event loop runs in this thread: use a
    # helper thread with a loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


def _create(name: str) -> str:
    _blocking(_script(_dsn_for("postgres"), f'CREATE DATABASE "{name}"'))
    return _dsn_for(name)


def _drop(name: str) -> None:
    _blocking(_script(_dsn_for("postgres"), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def make_database() -> Iterator[Callable[[], str]]:
    """Factory of empty scratch databases (no schema); all dropped after the test."""
    names: list[str] = []

    def make() -> str:
        name = f"skiplock_test_{uuid.uuid4().hex[:12]}"
        names.append(name)
        return _create(name)

    yield make
    for name in names:
        _drop(name)


@pytest.fixture(scope="session")
def apg_session_dsn() -> Iterator[str]:
    """One database for the session with the default schema applied."""
    name = f"skiplock_test_{uuid.uuid4().hex[:12]}"
    dsn = _create(name)
    try:
        _blocking(apply_schema(dsn))
        yield dsn
    finally:
        _drop(name)


@pytest.fixture
async def apg_dsn(apg_session_dsn: str) -> str:
    """The session database, emptied for this test, with an application table."""
    await _script(
        apg_session_dsn,
        "; ".join(f"DELETE FROM skiplock.{t}" for t in TABLES)
        + "; CREATE TABLE IF NOT EXISTS public.effects (job_id bigint, note text)"
        + "; DELETE FROM public.effects",
    )
    return apg_session_dsn


@pytest.fixture
async def db(apg_dsn: str) -> AsyncIterator[Any]:
    """A pool of other sessions on the test database: what they see is committed data."""
    pool = await asyncpg.create_pool(apg_dsn, min_size=1, max_size=2)
    yield pool
    await pool.close()


@pytest.fixture
async def store(apg_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
    store = AsyncpgJobStore(apg_dsn, max_size=8)
    yield store
    await store.close()
