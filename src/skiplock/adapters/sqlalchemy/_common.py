"""Helpers of both SQLAlchemy drivers (hand-written, sync only: the async driver runs
them through ``run_sync``).

The SQL is the shared ``_pg`` SQL: queries converted to the ``named`` style become cached
``text()`` constructs (``:name`` binds, which every SQLAlchemy PostgreSQL driver takes),
and the parameterless migration scripts go to the driver's own connection.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import AdaptedConnection

from skiplock.adapters._pg._sql import quote_identifier

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sqlalchemy import Connection, TextClause
    from sqlalchemy.engine import URL, Dialect

logger = logging.getLogger("skiplock.adapters.sqlalchemy")

# Keys SQLAlchemy's asyncpg dialect reads from the URL itself (asyncpg.connect refuses them).
_SQLALCHEMY_ONLY = frozenset(
    {"prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback"}
)


#: SQLSTATE of a write refused by a server that answers read-only (a primary demoted in
#: place, or a standby): the driver treats it as a lost connection (docs/failover.md).
READ_ONLY = "25006"


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a SQLAlchemy ``DBAPIError``'s driver error (psycopg's ``sqlstate``,
    the asyncpg dialect's adapted ``sqlstate``/``pgcode``), or None."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state if isinstance(state, str) else None


@functools.cache
def text_of(sql: str) -> TextClause:
    """``text(sql)``, built once per distinct text (SQLAlchemy then caches its compilation)."""
    return text(sql)


def run_script(conn: Connection, script: str) -> None:
    """Run a parameterless multi-statement script in ``conn``'s current transaction.

    It bypasses SQLAlchemy's execution, which would pass parameters (psycopg then reads
    ``%`` as a placeholder) or prepare the text (asyncpg: one command per statement).
    """
    # SQLAlchemy and its asyncio adapters begin the transaction lazily, on a statement.
    conn.exec_driver_sql("SELECT 1")
    run_raw(conn, script)


def run_raw(conn: Connection, script: str) -> None:
    """Send a parameterless script straight to the driver's connection (no SQLAlchemy
    transaction handling: on an autocommit connection ``BEGIN`` opens a block)."""
    dbapi = conn.connection.dbapi_connection
    if dbapi is None:
        raise RuntimeError("the SQLAlchemy connection has no DBAPI connection")
    if isinstance(dbapi, AdaptedConnection):  # an asyncio driver (asyncpg, psycopg async)
        dbapi.run_async(lambda driver: driver.execute(script))
        return
    cursor = dbapi.cursor()
    try:
        cursor.execute(script)
    finally:
        cursor.close()


def in_autocommit(conn: Connection) -> bool:
    """Whether the driver's connection under ``conn`` is in autocommit mode (an AUTOCOMMIT
    isolation level): SQLAlchemy's ``begin()`` then reaches no server."""
    return getattr(conn.connection.dbapi_connection, "autocommit", False) is True


def run_copy(
    conn: Connection, into: tuple[str, str], columns: Sequence[str], rows: Iterable[tuple[Any, ...]]
) -> None:
    """Bulk-load ``rows`` into the table ``into`` (schema, table) in ``conn``'s current
    transaction (which a statement on ``conn`` has begun): COPY through the driver when it
    is asyncpg or psycopg, else a multi-row INSERT through SQLAlchemy."""
    schema, table = into
    dbapi = conn.connection.dbapi_connection
    driver = conn.dialect.driver
    if driver == "asyncpg" and isinstance(dbapi, AdaptedConnection):
        dbapi.run_async(
            lambda raw: raw.copy_records_to_table(
                table, records=rows, columns=list(columns), schema_name=schema
            )
        )
        return
    target = f"{quote_identifier(schema)}.{quote_identifier(table)}"
    names = ", ".join(quote_identifier(c) for c in columns)
    if driver == "psycopg" and dbapi is not None:
        copy_sql = f"COPY {target} ({names}) FROM STDIN"
        if isinstance(dbapi, AdaptedConnection):

            async def copy_async(raw: Any) -> None:
                async with raw.cursor() as cur, cur.copy(copy_sql) as copy:
                    for row in rows:
                        await copy.write_row(row)

            dbapi.run_async(copy_async)
            return
        with dbapi.cursor() as cur, cur.copy(copy_sql) as copy:  # type: ignore[attr-defined]
            for row in rows:
                copy.write_row(row)
        return
    # Other drivers: SQLAlchemy's executemany; text parameters become json(b) on insert.
    binds = ", ".join(f":c{i}" for i in range(len(columns)))
    insert = text(f"INSERT INTO {target} ({names}) VALUES ({binds})")
    conn.execute(insert, [{f"c{i}": v for i, v in enumerate(row)} for row in rows])


def _url_arguments(dialect: Dialect, url: URL) -> tuple[list[Any], dict[str, Any]]:
    cargs, cparams = dialect.create_connect_args(url)
    return list(cargs), dict(cparams)


def psycopg_conninfo(dialect: Dialect, url: URL) -> str:
    """A libpq conninfo string for a psycopg engine's URL (password included)."""
    from psycopg.conninfo import make_conninfo

    cargs, cparams = _url_arguments(dialect, url)
    base = cargs[0] if cargs and isinstance(cargs[0], str) else ""
    # Drop objects such as psycopg's adapters map: only conninfo values are wanted.
    values = {k: v for k, v in cparams.items() if isinstance(v, str | int)}
    return make_conninfo(base, **values)


def asyncpg_connect_kwargs(dialect: Dialect, url: URL) -> dict[str, Any]:
    """``asyncpg.connect`` keyword arguments for an asyncpg engine's URL."""
    _, cparams = _url_arguments(dialect, url)
    return {k: v for k, v in cparams.items() if k not in _SQLALCHEMY_ONLY}
