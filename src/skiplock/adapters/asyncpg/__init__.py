"""asyncpg adapter: the async job store, its LISTEN/NOTIFY notifier, schema tools.

asyncpg is async only, so this adapter has no sync flavour. Install with
``pip install skiplock[asyncpg]``::

    from skiplock.adapters.asyncpg import AsyncpgJobStore, apply_schema

    await apply_schema("postgresql://...")      # or: skiplock schema apply
    store = AsyncpgJobStore("postgresql://...")  # or AsyncpgJobStore(pool)
"""

from __future__ import annotations

from skiplock.adapters._pg import IndexState, SchemaStatus, search_index_sql

from ._notify import AsyncpgNotifier
from ._schema import apply_schema, schema_sql, schema_status
from ._search_indexes import add_search_index, drop_search_index, search_indexes
from ._store import AsyncpgJobStore

__all__ = [
    "AsyncpgJobStore",
    "AsyncpgNotifier",
    "IndexState",
    "SchemaStatus",
    "add_search_index",
    "apply_schema",
    "drop_search_index",
    "schema_sql",
    "schema_status",
    "search_index_sql",
    "search_indexes",
]
