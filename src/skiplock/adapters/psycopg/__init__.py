"""psycopg 3 adapter: job stores (async and sync), LISTEN/NOTIFY notifiers, schema tools.

Install with ``pip install skiplock[psycopg]``::

    from skiplock.adapters.psycopg import PsycopgJobStore, apply_schema

    apply_schema("postgresql://...")           # or: skiplock schema apply
    store = PsycopgJobStore("postgresql://...")

The drivers (:class:`PsycopgDriver`, :class:`AsyncPsycopgDriver`) are the stores' hook for
sending their statements another way: subclass one and name it in a store subclass's
``driver_class`` (docs/adapters/psycopg.md, "Sending the statements another way").
"""

from __future__ import annotations

from skiplock.adapters._pg import (
    IndexState,
    Query,
    SchemaStatus,
    quote_identifier,
    search_index_sql,
)
from skiplock.adapters._pg._migrate import Rows

from ._driver import PsycopgDriver
from ._driver_async import AsyncPsycopgDriver
from ._notify import PsycopgNotifier
from ._notify_async import AsyncPsycopgNotifier
from ._schema import (
    add_search_index,
    apply_schema,
    drop_search_index,
    schema_sql,
    schema_status,
    search_indexes,
)
from ._store import PsycopgJobStore
from ._store_async import AsyncPsycopgJobStore

__all__ = [
    "AsyncPsycopgDriver",
    "AsyncPsycopgJobStore",
    "AsyncPsycopgNotifier",
    "IndexState",
    "PsycopgDriver",
    "PsycopgJobStore",
    "PsycopgNotifier",
    "Query",
    "Rows",
    "SchemaStatus",
    "add_search_index",
    "apply_schema",
    "drop_search_index",
    "quote_identifier",
    "schema_sql",
    "schema_status",
    "search_index_sql",
    "search_indexes",
]
