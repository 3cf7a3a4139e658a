"""The skiplock adapters the harness can benchmark: adapter name → factory.

Adding an adapter is one factory and one registry line: say how to install the schema,
how to open an async job store, and how a transactional processor does one tiny write
through ``ctx.connection`` (the job's own transaction, in the driver's own dialect).
Factories import lazily so a missing driver is reported as "n/a (reason)", not a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: The harness's side table for transactional processors (one row per job, so a job
#: processed twice would fail on the primary key and show up in verification).
TX_TABLE = "bench_tx"


@dataclasses.dataclass(frozen=True)
class Adapter:
    """How to drive one skiplock store adapter."""

    name: str
    #: Install skiplock's schema: ``(conninfo, schema)``.
    apply_schema: Callable[[str, str], Awaitable[None]]
    #: An open ``AsyncJobStore`` for ``(conninfo, schema, pool_size)``.
    open_store: Callable[[str, str, int], Awaitable[Any]]
    #: One tiny write in the job's transaction: ``(ctx.connection, schema, job_number)``.
    tx_write: Callable[[Any, str, int], Awaitable[None]]


def _psycopg() -> Adapter:
    from psycopg import sql

    from skiplock.adapters import psycopg as sp

    async def apply_schema(conninfo: str, schema: str) -> None:
        # The module-level helper is the sync flavour; keep the harness's loop free.
        await asyncio.to_thread(sp.apply_schema, conninfo, schema=schema)

    async def open_store(conninfo: str, schema: str, pool_size: int) -> Any:
        store = sp.AsyncPsycopgJobStore(conninfo, schema=schema, max_size=pool_size)
        await store.open()
        return store

    async def tx_write(connection: Any, schema: str, number: int) -> None:
        query = sql.SQL("INSERT INTO {}.{} (i) VALUES (%s)").format(
            sql.Identifier(schema), sql.Identifier(TX_TABLE)
        )
        await connection.execute(query, [number])

    return Adapter("psycopg", apply_schema, open_store, tx_write)


def _asyncpg() -> Adapter:
    from benchmarks._pg import to_uri
    from skiplock.adapters import asyncpg as ap

    async def apply_schema(conninfo: str, schema: str) -> None:
        await ap.apply_schema(to_uri(conninfo), schema=schema)

    async def open_store(conninfo: str, schema: str, pool_size: int) -> Any:
        # asyncpg reads only URI DSNs.
        store = ap.AsyncpgJobStore(to_uri(conninfo), schema=schema, max_size=pool_size)
        await store.open()
        return store

    async def tx_write(connection: Any, schema: str, number: int) -> None:
        await connection.execute(f'INSERT INTO "{schema}"."{TX_TABLE}" (i) VALUES ($1)', number)

    return Adapter("asyncpg", apply_schema, open_store, tx_write)


def _sqlalchemy() -> Adapter:
    import sqlalchemy as sa
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from skiplock.adapters.sqlalchemy import AsyncSessionJobStore

    def url(conninfo: str) -> sa.URL:
        params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
        port = params.pop("port", None)
        return sa.URL.create(
            "postgresql+asyncpg",
            username=params.pop("user", None),
            password=params.pop("password", None),
            host=params.pop("host", None),
            port=int(port) if port else None,
            database=params.pop("dbname", None),
        )

    async def apply_schema(conninfo: str, schema: str) -> None:
        engine = create_async_engine(url(conninfo), poolclass=NullPool)
        try:
            await AsyncSessionJobStore(engine, schema=schema).apply_schema()
        finally:
            await engine.dispose()

    class _Store(AsyncSessionJobStore):
        # Disposes the engine the harness created for it when the store closes.
        async def close(self) -> None:
            try:
                await super().close()
            finally:
                await self.engine.dispose()

    async def open_store(conninfo: str, schema: str, pool_size: int) -> Any:
        engine = create_async_engine(url(conninfo), pool_size=pool_size, max_overflow=2)
        store = _Store(engine, schema=schema)
        await store.open()
        return store

    async def tx_write(connection: Any, schema: str, number: int) -> None:
        await connection.execute(
            sa.text(f'INSERT INTO "{schema}"."{TX_TABLE}" (i) VALUES (:i)'), {"i": number}
        )

    return Adapter("sqlalchemy", apply_schema, open_store, tx_write)


#: adapter name → factory. The factory raises ImportError/AttributeError when the
#: adapter is not available.
ADAPTERS: dict[str, Callable[[], Adapter]] = {
    "psycopg": _psycopg,
    "asyncpg": _asyncpg,
    "sqlalchemy": _sqlalchemy,
}


def get_adapter(name: str) -> Adapter:
    """The adapter registered as ``name``."""
    try:
        factory = ADAPTERS[name]
    except KeyError:
        raise ValueError(f"unknown adapter {name!r}; known: {sorted(ADAPTERS)}") from None
    return factory()
