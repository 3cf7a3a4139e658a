"""Fixtures of the SQLAlchemy integration tests (databases come from ``tests/pgfixtures.py``).

No ``__init__.py`` here: this folder's name would shadow the ``sqlalchemy`` package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import URL

#: The application's own tables, mapped by the tests' ORM models.
APP_DDL = (
    "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, item text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS receipts (id serial PRIMARY KEY, order_id integer NOT NULL)",
)
APP_TABLES = ("orders", "receipts")


def _url(dsn: str) -> URL:
    """A scratch database's DSN as a SQLAlchemy URL through psycopg."""
    return make_url(dsn).set(drivername="postgresql+psycopg")


@pytest.fixture
def make_database(make_database: Callable[[], str]) -> Callable[[], URL]:
    """Factory of empty scratch databases as psycopg URLs; all dropped after the test."""
    return lambda: _url(make_database())


@pytest.fixture(scope="session")
def sa_session_url(pg_session_dsn: str) -> URL:
    """The session database, with the application's tables beside skiplock's schema."""
    url = _url(pg_session_dsn)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        for ddl in APP_DDL:
            conn.exec_driver_sql(ddl)
    engine.dispose()
    return url


@pytest.fixture
def sa_url(sa_session_url: URL, pg_dsn: str) -> URL:
    """The session database, emptied for this test (psycopg URL)."""
    engine = sa.create_engine(sa_session_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        for app_table in APP_TABLES:
            conn.exec_driver_sql(f"DELETE FROM {app_table}")
    engine.dispose()
    return sa_session_url
