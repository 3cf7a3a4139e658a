"""Fixtures of the asyncpg integration tests (databases come from ``tests/pgfixtures.py``).

No psycopg here (tox's asyncpg env installs only asyncpg), and no ``__init__.py``: this
folder's name would shadow the ``asyncpg`` package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture(scope="session")
def apg_session_dsn(pg_session_dsn: str) -> str:
    """The session database (the name the asyncpg tests use)."""
    return pg_session_dsn


@pytest.fixture
def apg_dsn(pg_dsn: str, effects: str) -> str:
    """The session database, emptied for this test, with an application table."""
    return pg_dsn


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
