"""Schema management over psycopg: what ``skiplock schema apply|sql|status`` runs."""

from __future__ import annotations

import psycopg

from skiplock.adapters._pg import SchemaStatus
from skiplock.adapters._pg import schema_sql as _schema_sql
from skiplock.core import validate_identifier

from ._driver import apply_migrations, read_status


def apply_schema(conninfo: str, schema: str = "skiplock") -> list[str]:
    """Apply pending migrations (idempotent, safe concurrently); returns their names."""
    validate_identifier(schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return apply_migrations(conn, schema)


def schema_sql(schema: str = "skiplock") -> str:
    """Standalone DDL creating the current schema in a fresh database."""
    return _schema_sql(schema)


def schema_status(conninfo: str, schema: str = "skiplock") -> SchemaStatus:
    """Applied and pending migrations of ``schema``."""
    validate_identifier(schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return read_status(conn, schema)
