"""The asyncpg store against the contract kit, on a scratch PostgreSQL database.

Only asyncpg is used here (tox's asyncpg env installs no psycopg).
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import uuid
from typing import TYPE_CHECKING

import asyncpg
import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore, apply_schema
from skiplock.testing import Capabilities
from skiplock.testing.contract import AsyncJobStoreContract

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.postgres

_DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
_TABLES = ("jobs", "workers", "audit", "jobs_archive", "maintenance")


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def contract_dsn() -> Iterator[str]:
    """A fresh database with the schema applied; dropped at the end (fails if unreachable)."""
    base = os.environ.get("SKIPLOCK_TEST_DSN", _DEFAULT_DSN)
    name = f"skiplock_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(base, f'CREATE DATABASE "{name}"'))
    try:
        dsn = urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()
        asyncio.run(apply_schema(dsn))
        yield dsn
    finally:
        asyncio.run(_admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class TestAsyncpgJobStore(AsyncJobStoreContract):
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture
    async def store(self, contract_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
        # DELETE, not TRUNCATE: on tables this small it is much faster.
        await _admin(contract_dsn, "; ".join(f"DELETE FROM skiplock.{t}" for t in _TABLES))
        store = AsyncpgJobStore(contract_dsn, max_size=12)
        yield store
        await store.close()


class TestAsyncpgJobStorePgBouncerMode(AsyncJobStoreContract):
    """The same contract with ``pgbouncer=True``: no statement cache, no LISTEN."""

    capabilities = Capabilities(listen_notify=False, controllable_clock=False)

    @pytest.fixture
    async def store(self, contract_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
        await _admin(contract_dsn, "; ".join(f"DELETE FROM skiplock.{t}" for t in _TABLES))
        store = AsyncpgJobStore(contract_dsn, max_size=12, pgbouncer=True)
        yield store
        await store.close()
