"""asyncpg adapter: the async job store, its LISTEN/NOTIFY notifier, schema tools.

asyncpg is async only, so this adapter has no sync flavour. Install with
``pip install skiplock[asyncpg]``::

    from skiplock.adapters.asyncpg import AsyncpgJobStore, apply_schema

    await apply_schema("postgresql://...")      # or: skiplock schema apply
    store = AsyncpgJobStore("postgresql://...")  # or AsyncpgJobStore(pool)
"""

from __future__ import annotations

from skiplock.adapters._pg import SchemaStatus

from ._notify import AsyncpgNotifier
from ._schema import apply_schema, schema_sql, schema_status
from ._store import AsyncpgJobStore

__all__ = [
    "AsyncpgJobStore",
    "AsyncpgNotifier",
    "SchemaStatus",
    "apply_schema",
    "schema_sql",
    "schema_status",
]
