"""Schema management over psycopg: what ``skiplock schema apply|sql|status`` runs."""

from __future__ import annotations

import psycopg

from skiplock.adapters._pg import IndexState, Progress, SchemaStatus
from skiplock.adapters._pg import schema_sql as _schema_sql

from ._store import PsycopgJobStore


def apply_schema(
    conninfo: str, schema: str = "skiplock", *, progress: Progress | None = None
) -> list[str]:
    """Apply pending migrations (idempotent, safe concurrently); returns their names.
    ``progress`` is called with a line of text as each step starts and ends."""
    store = PsycopgJobStore(conninfo, schema=schema)  # its pool is never opened
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return store.apply_schema(connection=conn, progress=progress)


def schema_sql(schema: str = "skiplock", from_version: int = 0) -> str:
    """Standalone DDL creating the current schema in a fresh database, or with
    ``from_version`` N the upgrade script from version N (``skiplock schema sql --from N``)."""
    return _schema_sql(schema, from_version)


def schema_status(conninfo: str, schema: str = "skiplock") -> SchemaStatus:
    """Applied and pending migrations of ``schema``."""
    store = PsycopgJobStore(conninfo, schema=schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return store.schema_status(connection=conn)


def search_indexes(conninfo: str, schema: str = "skiplock") -> list[IndexState]:
    """Which opt-in search indexes ``schema`` has (``skiplock schema index list``)."""
    store = PsycopgJobStore(conninfo, schema=schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return store.search_indexes(connection=conn)


def add_search_index(
    conninfo: str,
    name: str,
    schema: str = "skiplock",
    *,
    create_extension: bool = False,
    progress: Progress | None = None,
) -> bool:
    """Build the opt-in search index ``name`` (``payload`` or ``error``) concurrently
    unless it exists; returns whether it was built (``skiplock schema index add``; see
    ``PsycopgJobStore.add_search_index``)."""
    store = PsycopgJobStore(conninfo, schema=schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return store.add_search_index(
            name, create_extension=create_extension, connection=conn, progress=progress
        )


def drop_search_index(
    conninfo: str, name: str, schema: str = "skiplock", *, progress: Progress | None = None
) -> bool:
    """Drop the opt-in search index ``name`` concurrently if it exists; returns whether
    one was dropped (``skiplock schema index drop``)."""
    store = PsycopgJobStore(conninfo, schema=schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return store.drop_search_index(name, connection=conn, progress=progress)
