"""The PostgreSQL fixtures of every test suite: scratch databases on the test server.

Registered once in ``tests/conftest.py``. The server comes from ``SKIPLOCK_TEST_DSN`` (a
URL; default: local, user postgres). Every database gets a random name and is dropped
afterwards, so parallel runs do not collide. An unreachable server makes the tests fail,
never skip.

The admin work goes through psycopg when it is installed, else through asyncpg: tox's
asyncpg env installs no psycopg, and the plugin loads in every env (the imports are
lazy, so the pure-core env needs neither). The tables to empty between tests are read
from the schema script itself, not listed by hand.

``execute`` and ``fetch`` run plain SQL through either driver.

Fixtures: ``pg_session_dsn``/``pg_dsn`` (the session database, emptied per test),
``make_database`` (empty scratch databases), ``later_database`` (one that does not exist
yet), ``effects`` (an application table for a processor's own writes). Test folders add
driver-typed wrappers over these, never their own databases; ``store_fixture`` makes a
module's ``store`` fixture.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.resources
import importlib.util
import inspect
import os
import re
import urllib.parse
import uuid
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine, Iterator

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: The schema every scratch database with a schema gets.
SCHEMA = "skiplock"


def base_dsn() -> str:
    """The test server's maintenance database."""
    return os.environ.get("SKIPLOCK_TEST_DSN", DEFAULT_DSN)


def dsn_for(name: str) -> str:
    """The test server's database ``name``."""
    base = base_dsn()
    if "://" in base:
        return urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()
    return f"{base} dbname={name}"  # key=value: a later keyword wins


def quote(identifier: str) -> str:
    """``identifier`` as a quoted SQL identifier."""
    return '"' + identifier.replace('"', '""') + '"'


@cache
def tables() -> tuple[str, ...]:
    """The tables of skiplock's schema, in the order its script creates them."""
    script = importlib.resources.files("skiplock.adapters._pg") / "sql" / "schema.sql"
    found = re.findall(r"CREATE TABLE \{schema\}\.(\w+)", script.read_text(encoding="utf-8"))
    assert found, "no CREATE TABLE found in schema.sql"
    return tuple(found)


def empty_statements(schema: str = SCHEMA) -> list[str]:
    """Statements emptying every table of skiplock's ``schema``."""
    # DELETE, not TRUNCATE: on tables this small it is ten times faster.
    return [f"DELETE FROM {quote(schema)}.{quote(table)}" for table in tables()]


def _has_psycopg() -> bool:
    return importlib.util.find_spec("psycopg") is not None


def execute(dsn: str, statements: list[str]) -> None:
    """Run parameterless ``statements`` on ``dsn``, each in its own autocommit step."""
    if _has_psycopg():
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        return

    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    _blocking(run)


def fetch(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of one parameterless ``query`` on ``dsn`` (psycopg, else asyncpg)."""
    if _has_psycopg():
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            return [tuple(row) for row in conn.execute(query).fetchall()]

    import asyncpg

    rows: list[tuple[Any, ...]] = []

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            rows.extend(tuple(row) for row in await conn.fetch(query))
        finally:
            await conn.close()

    _blocking(run)
    return rows


def _blocking(run: Callable[[], Coroutine[Any, Any, object]]) -> None:
    # Sync fixtures may run while a test's event loop runs in this thread: use a helper
    # thread with a loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(run())).result()


def apply_schema(dsn: str) -> None:
    """Apply skiplock's schema through the installed driver's public tool."""
    if _has_psycopg():
        from skiplock.adapters import psycopg

        psycopg.apply_schema(dsn)
        return
    from skiplock.adapters import asyncpg

    _blocking(lambda: asyncpg.apply_schema(dsn))


def new_name() -> str:
    """A fresh, random database name."""
    return f"skiplock_test_{uuid.uuid4().hex[:12]}"


def create_database(with_schema: bool = False, name: str | None = None) -> tuple[str, str]:
    """A new database on the test server (``name`` or a fresh one): its name and DSN."""
    name = name or new_name()
    execute(base_dsn(), [f"CREATE DATABASE {quote(name)}"])
    dsn = dsn_for(name)
    if with_schema:
        try:
            apply_schema(dsn)
        except BaseException:
            drop_database(name)
            raise
    return name, dsn


def drop_database(name: str) -> None:
    execute(base_dsn(), [f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)"])


@pytest.fixture
def make_database() -> Iterator[Callable[[], str]]:
    """Factory of empty scratch databases (no schema); all dropped after the test."""
    names: list[str] = []

    def make() -> str:
        name, dsn = create_database()
        names.append(name)
        return dsn

    yield make
    for name in names:
        drop_database(name)


class LaterDatabase(NamedTuple):
    """A database that does not exist yet: its DSN, and ``create()`` to make it (empty)."""

    dsn: str
    create: Callable[[], object]


@pytest.fixture
def later_database() -> Iterator[LaterDatabase]:
    """A database that does not exist yet, for tests of what a store does until it does;
    dropped after the test if it was created."""
    name = new_name()
    yield LaterDatabase(dsn_for(name), lambda: create_database(name=name))
    drop_database(name)


@pytest.fixture(scope="session")
def pg_session_dsn() -> Iterator[str]:
    """One database for the whole session with skiplock's schema applied."""
    name, dsn = create_database(with_schema=True)
    try:
        yield dsn
    finally:
        drop_database(name)


@pytest.fixture
def pg_dsn(pg_session_dsn: str) -> str:
    """The session database, skiplock's tables emptied for this test."""
    execute(pg_session_dsn, empty_statements())
    return pg_session_dsn


@pytest.fixture
def effects(pg_dsn: str) -> str:
    """An application table beside skiplock's, emptied for this test, for a processor's own
    writes (R10); its qualified name."""
    execute(
        pg_dsn,
        [
            "CREATE TABLE IF NOT EXISTS public.effects (job_id bigint, note text)",
            "DELETE FROM public.effects",
        ],
    )
    return "public.effects"


def store_fixture(store_class: Callable[..., Any], **options: Any) -> Any:
    """A ``store`` fixture for a test module: ``store_class(pg_dsn, **options)``, closed
    after the test. Written once for async and sync stores (an async source's
    ``store_fixture(AsyncPsycopgJobStore, ...)`` becomes the twin's
    ``store_fixture(PsycopgJobStore, ...)``)."""
    if inspect.iscoroutinefunction(getattr(store_class, "close", None)):

        @pytest.fixture
        async def store(pg_dsn: str) -> AsyncIterator[Any]:
            opened = store_class(pg_dsn, **options)
            yield opened
            await opened.close()

        return store

    @pytest.fixture(name="store")
    def sync_store(pg_dsn: str) -> Iterator[Any]:
        opened = store_class(pg_dsn, **options)
        yield opened
        opened.close()

    return sync_store
