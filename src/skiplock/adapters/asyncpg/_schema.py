"""Schema management over asyncpg (the same migrations ``skiplock schema`` applies)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from skiplock.adapters._pg import Progress, SchemaStatus
from skiplock.adapters._pg import schema_sql as _schema_sql

from ._store import AsyncpgJobStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def one_connection(dsn: str, schema: str) -> AsyncIterator[AsyncpgJobStore]:
    """A store of ``schema`` on a pool of one connection, closed on the way out (what each
    schema tool here and in ``_search_indexes`` runs on)."""
    store = AsyncpgJobStore(dsn, schema=schema, min_size=1, max_size=1)
    try:
        yield store
    finally:
        await store.close()


async def apply_schema(
    dsn: str, schema: str = "skiplock", *, progress: Progress | None = None
) -> list[str]:
    """Apply pending migrations (idempotent, safe concurrently); returns their names.
    ``progress`` is called with a line of text as each step starts and ends."""
    async with one_connection(dsn, schema) as store:
        return await store.apply_schema(progress=progress)


async def schema_status(dsn: str, schema: str = "skiplock") -> SchemaStatus:
    """Applied and pending migrations of ``schema``."""
    async with one_connection(dsn, schema) as store:
        return await store.schema_status()


def schema_sql(schema: str = "skiplock", from_version: int = 0) -> str:
    """Standalone DDL creating the current schema in a fresh database, or with
    ``from_version`` N the upgrade script from version N (``skiplock schema sql --from N``)."""
    return _schema_sql(schema, from_version)
