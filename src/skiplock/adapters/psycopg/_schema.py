"""Schema management over psycopg: what ``skiplock schema apply|sql|status`` runs."""

from __future__ import annotations

import psycopg

from skiplock.adapters._pg import Progress, SchemaStatus
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
