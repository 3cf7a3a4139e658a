"""Fixtures of the SQLAlchemy integration tests: scratch databases on the test server.

The server comes from ``SKIPLOCK_TEST_DSN`` (a URL; default: local, user postgres). Every
database gets a random name and is dropped afterwards. An unreachable server makes the
tests fail, never skip. No ``__init__.py`` here: this folder's name would shadow the
``sqlalchemy`` package.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from skiplock.adapters.sqlalchemy import SessionJobStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sqlalchemy.engine import URL

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SKIPLOCK_TABLES = ("jobs", "workers", "audit", "jobs_archive", "maintenance")
#: The application's own tables, mapped by the tests' ORM models.
APP_DDL = (
    "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)",
    "CREATE TABLE receipts (id serial PRIMARY KEY, order_id integer NOT NULL)",
)
APP_TABLES = ("orders", "receipts")


def admin_url() -> URL:
    """The test server's maintenance database, through psycopg."""
    url = make_url(os.environ.get("SKIPLOCK_TEST_DSN", DEFAULT_DSN))
    return url.set(drivername="postgresql+psycopg")


def _admin(sql: str) -> None:
    engine = sa.create_engine(admin_url(), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


@pytest.fixture
def make_database() -> Iterator[Callable[[], URL]]:
    """Factory of empty scratch databases (no schema); all dropped after the test."""
    names: list[str] = []

    def make() -> URL:
        name = f"skiplock_test_{uuid.uuid4().hex[:12]}"
        _admin(f'CREATE DATABASE "{name}"')
        names.append(name)
        return admin_url().set(database=name)

    yield make
    for name in names:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sa_session_url() -> Iterator[URL]:
    """One database for the session: skiplock's schema plus the application's tables."""
    name = f"skiplock_test_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        url = admin_url().set(database=name)
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        SessionJobStore(engine).apply_schema()
        with engine.begin() as conn:
            for ddl in APP_DDL:
                conn.exec_driver_sql(ddl)
        engine.dispose()
        yield url
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sa_url(sa_session_url: URL) -> URL:
    """The session database, emptied for this test (psycopg URL)."""
    engine = sa.create_engine(sa_session_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        for table in SKIPLOCK_TABLES:
            conn.exec_driver_sql(f'DELETE FROM "skiplock"."{table}"')
        for app_table in APP_TABLES:
            conn.exec_driver_sql(f"DELETE FROM {app_table}")
    engine.dispose()
    return sa_session_url
