"""The opt-in search indexes over asyncpg (what ``skiplock schema index`` runs where
psycopg is not installed; docs/search.md, "The opt-in search indexes")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._schema import one_connection

if TYPE_CHECKING:
    from skiplock.adapters._pg import IndexState, Progress


async def search_indexes(dsn: str, schema: str = "skiplock") -> list[IndexState]:
    """Which opt-in search indexes ``schema`` has (``skiplock schema index list``)."""
    async with one_connection(dsn, schema) as store:
        return await store.search_indexes()


async def add_search_index(
    dsn: str,
    name: str,
    schema: str = "skiplock",
    *,
    create_extension: bool = False,
    progress: Progress | None = None,
) -> bool:
    """Build the opt-in search index ``name`` (``payload`` or ``error``) concurrently
    unless it exists; returns whether it was built (``skiplock schema index add``)."""
    async with one_connection(dsn, schema) as store:
        return await store.add_search_index(
            name, create_extension=create_extension, progress=progress
        )


async def drop_search_index(
    dsn: str, name: str, schema: str = "skiplock", *, progress: Progress | None = None
) -> bool:
    """Drop the opt-in search index ``name`` concurrently if it exists; returns whether
    one was dropped (``skiplock schema index drop``)."""
    async with one_connection(dsn, schema) as store:
        return await store.drop_search_index(name, progress=progress)
