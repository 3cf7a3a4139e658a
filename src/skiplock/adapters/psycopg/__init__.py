"""psycopg 3 adapter: job stores (async and sync), LISTEN/NOTIFY notifiers, schema tools.

Install with ``pip install skiplock[psycopg]``::

    from skiplock.adapters.psycopg import PsycopgJobStore, apply_schema

    apply_schema("postgresql://...")           # or: skiplock schema apply
    store = PsycopgJobStore("postgresql://...")
"""

from __future__ import annotations

from skiplock.adapters._pg import SchemaStatus, quote_identifier

from ._notify import PsycopgNotifier
from ._notify_async import AsyncPsycopgNotifier
from ._schema import apply_schema, schema_sql, schema_status
from ._store import PsycopgJobStore
from ._store_async import AsyncPsycopgJobStore

__all__ = [
    "AsyncPsycopgJobStore",
    "AsyncPsycopgNotifier",
    "PsycopgJobStore",
    "PsycopgNotifier",
    "SchemaStatus",
    "apply_schema",
    "quote_identifier",
    "schema_sql",
    "schema_status",
]
