"""Helpers of both SQLAlchemy stores and the Alembic helper (hand-written, sync only).

The SQL is the shared ``_pg`` SQL: queries converted to the ``named`` style become cached
``text()`` constructs (``:name`` binds, which every SQLAlchemy PostgreSQL driver takes),
and the parameterless migration scripts go to the driver's own connection.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import AdaptedConnection

from skiplock.adapters._pg._sql import convert_cached, quote_identifier

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    from sqlalchemy import Connection, TextClause
    from sqlalchemy.engine import URL, Dialect

    from skiplock.adapters._pg._migrate import Rows, Step

T = TypeVar("T")

logger = logging.getLogger("skiplock.adapters.sqlalchemy")

# Keys SQLAlchemy's asyncpg dialect reads from the URL itself (asyncpg.connect refuses them).
_SQLALCHEMY_ONLY = frozenset(
    {"prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback"}
)


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


def run_copy(
    conn: Connection,
    schema: str,
    table: str,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
) -> None:
    """Bulk-load ``rows`` into ``schema.table`` in ``conn``'s current transaction (which a
    statement on ``conn`` has begun): COPY through the driver when it is asyncpg or
    psycopg, else a multi-row INSERT through SQLAlchemy."""
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


def run_steps(conn: Connection, steps: Generator[Step, Rows, T]) -> T:
    """Drive a ``_pg`` step generator on a sync connection (the Alembic helper's need)."""
    try:
        step = next(steps)
        while True:
            if step.params is None:
                run_script(conn, step.sql)
                rows: Rows = []
            else:
                query = text_of(convert_cached(step.sql, "named").text)
                result = conn.execute(query, dict(step.params))
                rows = [dict(r) for r in result.mappings()] if result.returns_rows else []
            step = steps.send(rows)
    except StopIteration as stop:
        value: T = stop.value
        return value


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
