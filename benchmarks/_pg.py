"""Harness-side PostgreSQL helpers: fresh databases, probes, housekeeping.

The harness talks to PostgreSQL through psycopg directly (never through the system under
test) for setup, progress polling and verification, so every system is observed the
same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

#: What psycopg accepts as a statement.
Query = str | sql.SQL | sql.Composed

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"

#: Every database the harness creates starts with this; nothing else is ever dropped.
DB_PREFIX = "skiplock_bench_"


def default_dsn() -> str:
    """``SKIPLOCK_BENCH_DSN`` or the local default server."""
    return os.environ.get("SKIPLOCK_BENCH_DSN") or DEFAULT_DSN


def with_dbname(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at another database (key=value conninfo)."""
    return make_conninfo(dsn, dbname=dbname)


def dbname_of(conninfo: str) -> str:
    """The database a conninfo names."""
    return str(conninfo_to_dict(conninfo).get("dbname", ""))


def new_run_id() -> str:
    """A short random token that names this run's databases."""
    return secrets.token_hex(4)


@asynccontextmanager
async def fresh_database(dsn: str, name: str) -> AsyncIterator[str]:
    """Create database ``name`` (which must start with ``skiplock_bench_``), yield its
    conninfo, and drop it afterwards even when the body fails."""
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"refusing to manage database {name!r}")
    ident = sql.Identifier(name)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield with_dbname(dsn, name)
    finally:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            # FORCE ends sessions a crashed worker may have left behind.
            await admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


async def execute(conninfo: str, query: Query, params: Sequence[Any] = ()) -> None:
    """Run one statement in autocommit mode."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(query, params)


async def fetch_one(conninfo: str, query: Query, params: Sequence[Any] = ()) -> tuple[Any, ...]:
    """First row of a query (autocommit)."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    if row is None:
        raise RuntimeError("query returned no row")
    return tuple(row)


async def fetch_all(
    conninfo: str, query: Query, params: Sequence[Any] = ()
) -> list[tuple[Any, ...]]:
    """Every row of a query (autocommit)."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return [tuple(row) for row in await cur.fetchall()]


async def settle(conninfo: str, *, analyze: bool = True) -> None:
    """Before a timed phase: VACUUM ANALYZE (unless ``analyze`` is False: cold tables,
    whose planner statistics stay as the prefill left them, i.e. none) and CHECKPOINT.

    A checkpoint in the middle of a short run would dominate it, so it is taken out of
    the measurement either way.
    """
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        if analyze:
            await conn.execute("VACUUM ANALYZE")
        # CHECKPOINT needs superuser (or pg_checkpoint); the run is still valid without.
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            await conn.execute("CHECKPOINT")


#: The database's own tables: every ordinary table outside the system schemas.
_USER_TABLES = """
    SELECT n.nspname, c.relname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind = 'r' AND c.relpersistence <> 't'
      AND n.nspname NOT IN ('pg_catalog', 'information_schema')
    ORDER BY 1, 2
"""


async def autovacuum_off(conninfo: str) -> list[str]:
    """Turn autovacuum, and with it autoanalyze, off for every table of the database
    (``autovacuum_enabled = false``), so no statistics appear on their own during a
    timed phase; returns the tables as ``schema.table``."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(_USER_TABLES)
        tables = [(str(schema), str(name)) for schema, name in await cur.fetchall()]
        for schema, name in tables:
            await conn.execute(
                sql.SQL("ALTER TABLE {}.{} SET (autovacuum_enabled = false)").format(
                    sql.Identifier(schema), sql.Identifier(name)
                )
            )
    return [f"{schema}.{name}" for schema, name in tables]


@dataclasses.dataclass(frozen=True)
class TableStats:
    """What PostgreSQL knows about the database's own tables at one moment."""

    #: ANALYZE runs so far over them, manual and automatic (``pg_stat_user_tables``).
    analyses: int
    #: Columns with planner statistics (rows of ``pg_stats``): 0 on cold tables.
    columns: int


async def table_stats(conninfo: str) -> TableStats:
    """The analyze count and the statistics of the database's tables."""
    row = await fetch_one(
        conninfo,
        """
        SELECT
          (SELECT coalesce(sum(analyze_count + autoanalyze_count), 0) FROM pg_stat_user_tables),
          (SELECT count(*) FROM pg_stats
           WHERE schemaname NOT IN ('pg_catalog', 'information_schema'))
        """,
    )
    analyses, columns = (int(x) for x in row)
    return TableStats(analyses=analyses, columns=columns)


async def server_info(dsn: str) -> dict[str, str]:
    """Server version and the settings that decide commit throughput."""
    names = [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "full_page_writes",
        "shared_buffers",
        "max_connections",
        "autovacuum",
    ]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            [names],
        )
        rows = await cur.fetchall()
    return {str(name): str(value) for name, value in rows}


class Poller:
    """One dedicated autocommit connection that runs a cheap probe repeatedly."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], query: Query) -> None:
        self._conn = conn
        self._query = query

    @classmethod
    @asynccontextmanager
    async def open(cls, conninfo: str, query: Query) -> AsyncIterator[Poller]:
        """Connect and yield a poller for ``query`` (a query returning one integer)."""
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            # A probe over a big table would start parallel workers every poll: CPU taken
            # from the system under test on a small machine.
            await conn.execute("SET max_parallel_workers_per_gather = 0")
            yield cls(conn, query)

    async def value(self) -> int:
        """Run the probe once."""
        cur = await self._conn.execute(self._query, prepare=True)
        row = await cur.fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0


def to_uri(conninfo: str) -> str:
    """A ``postgresql://`` URI for drivers that do not read key=value conninfo (asyncpg)."""
    from urllib.parse import quote, urlencode

    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    user = params.pop("user", "")
    password = params.pop("password", "")
    host = params.pop("host", "")
    port = params.pop("port", "")
    dbname = params.pop("dbname", "")
    if host.startswith("/"):  # a Unix socket directory goes in the query string
        params["host"], host = host, ""
    auth = quote(user, safe="")
    if password:
        auth += ":" + quote(password, safe="")
    netloc = (auth + "@" if auth else "") + (f"[{host}]" if ":" in host else host)
    if port:
        netloc += f":{port}"
    query = ("?" + urlencode(params)) if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"
