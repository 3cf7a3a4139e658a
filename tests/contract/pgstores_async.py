"""Every PostgreSQL store by name (async source; ``pgstores.py`` is its generated twin).

Imported as ``tests.contract.pgstores_async`` by the test modules that run on each of
them. A store's driver is imported before the test asks for ``pg_dsn``: without the
driver's extra (the noextras tox env has none) the store is skipped, and a PostgreSQL
store fails when the server is unreachable.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The PostgreSQL stores: psycopg's and SQLAlchemy's on psycopg.
PG_STORES = ["psycopg", "sqlalchemy"]
if True:  # ASYNC
    #: Async only: asyncpg's too (``sqlalchemy-asyncpg``, SQLAlchemy's on asyncpg, is
    #: there when a module asks for it).
    PG_STORES = ["psycopg", "asyncpg", "sqlalchemy"]

#: The modules each PostgreSQL store needs (``sqlalchemy`` runs on psycopg).
DRIVERS = {
    "psycopg": ("psycopg",),
    "asyncpg": ("asyncpg",),
    "sqlalchemy": ("sqlalchemy", "psycopg"),
    "sqlalchemy-asyncpg": ("sqlalchemy", "asyncpg"),
}


def open_store(request: pytest.FixtureRequest, name: str, **options: Any) -> tuple[Any, Any]:
    """The PostgreSQL store ``name`` on the test's ``pg_dsn`` (``options`` go to a psycopg
    or asyncpg store), and the SQLAlchemy engine to dispose (or None): skipped when its
    driver is not installed, before ``pg_dsn`` is asked for."""
    for module in DRIVERS[name]:
        pytest.importorskip(module)
    dsn: str = request.getfixturevalue("pg_dsn")
    if name == "psycopg":
        if True:  # ASYNC
            from skiplock.adapters.psycopg import AsyncPsycopgJobStore as PsycopgStore
        else:
            from skiplock.adapters.psycopg import PsycopgJobStore as PsycopgStore

        return PsycopgStore(dsn, **options), None
    if True:  # ASYNC
        if name == "asyncpg":
            from skiplock.adapters.asyncpg import AsyncpgJobStore

            return AsyncpgJobStore(dsn, **options), None
    from sqlalchemy.engine import make_url

    if True:  # ASYNC
        from sqlalchemy.ext.asyncio import create_async_engine as create_engine

        from skiplock.adapters.sqlalchemy import AsyncSessionJobStore as SessionStore
    else:
        from sqlalchemy import create_engine

        from skiplock.adapters.sqlalchemy import SessionJobStore as SessionStore

    driver = DRIVERS[name][1]
    sa_engine = create_engine(make_url(dsn).set(drivername=f"postgresql+{driver}"))
    return SessionStore(sa_engine), sa_engine


async def close_store(store: Any, sa_engine: Any) -> None:
    """Close a store :func:`open_store` opened, and dispose of its SQLAlchemy engine."""
    await store.close()
    if sa_engine is not None:
        await sa_engine.dispose()
