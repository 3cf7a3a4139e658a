"""What the README's quick start claims about its enqueue (R0): on an autocommit
connection, ``conn.transaction()`` commits the application's row and the job together
when the block ends, and a block that raises leaves neither."""

from __future__ import annotations

import psycopg
import pytest

from skiplock import AsyncEngine
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from tests.pghelpers import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


class Boom(Exception):
    pass


def _visible(dsn: str) -> tuple[int, int]:
    """(users, jobs) as another connection sees them."""
    [(users,)] = sql(dsn, "SELECT count(*) FROM users")
    [(jobs,)] = sql(dsn, "SELECT count(*) FROM skiplock.jobs")
    return int(users), int(jobs)


async def test_the_quick_start_commits_at_the_end_of_the_block(pg_dsn: str) -> None:
    store = AsyncPsycopgJobStore(pg_dsn)
    engine = AsyncEngine(store)
    engine.declare_kind("email.welcome")
    try:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute("DROP TABLE IF EXISTS users")
            await conn.execute("CREATE TABLE users (id bigint PRIMARY KEY, email text)")
            async with conn.transaction():
                await conn.execute("INSERT INTO users VALUES (%s, %s)", [42, "a@example.com"])
                await engine.enqueue("email.welcome", {"user_id": 42}, connection=conn)
                assert _visible(pg_dsn) == (0, 0)  # not committed yet
            assert _visible(pg_dsn) == (1, 1)  # committed where the block ends
            try:
                async with conn.transaction():
                    await conn.execute("INSERT INTO users VALUES (%s, %s)", [43, "b@example.com"])
                    await engine.enqueue("email.welcome", {"user_id": 43}, connection=conn)
                    raise Boom
            except Boom:
                pass
            assert _visible(pg_dsn) == (1, 1)  # rolled back: neither row nor job
    finally:
        await store.close()
        sql(pg_dsn, "DROP TABLE IF EXISTS users")
