"""PostgreSQL layer shared by every PG adapter (psycopg, asyncpg, SQLAlchemy).

Driver-agnostic: the SQL files (schema, migrations, named queries), their loader and
placeholder conversion, row mapping, and the migration and multi-statement operations as
step generators that each driver runs. Imports no driver.
"""

from __future__ import annotations

from ._indexes import SEARCH_INDEXES, IndexState, SearchIndex, search_index_sql
from ._migrate import (
    Migration,
    Progress,
    SchemaStatus,
    Step,
    apply_steps,
    check_version,
    latest_version,
    migrations,
    schema_sql,
    status_steps,
)
from ._sql import Query, channel_name, convert, lock_key, queries, quote_identifier

__all__ = [
    "SEARCH_INDEXES",
    "IndexState",
    "Migration",
    "Progress",
    "Query",
    "SchemaStatus",
    "SearchIndex",
    "Step",
    "apply_steps",
    "channel_name",
    "check_version",
    "convert",
    "latest_version",
    "lock_key",
    "migrations",
    "queries",
    "quote_identifier",
    "schema_sql",
    "search_index_sql",
    "status_steps",
]
