"""The search contract on PostgreSQL with both opt-in search indexes (docs/search.md,
"The opt-in search indexes"), on every PostgreSQL store
(``tests.contract.pgstores_async``): the same answers as without them and as the memory
store's. An index changes how a search reads (a selective one through the index, whole),
never what it finds.

Async only: SQLAlchemy's store runs on both its drivers here.

A store whose driver extra is not installed is skipped; a PostgreSQL store fails when
the server is unreachable (``pg_dsn``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock.testing import Capabilities
from skiplock.testing.contract._search_async import AsyncSearchContract
from tests.contract.pgstores_async import PG_STORES, close_store, open_store

STORES = PG_STORES
if True:  # ASYNC
    STORES = [*PG_STORES, "sqlalchemy-asyncpg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres


class TestAsyncSearchIndexed(AsyncSearchContract):
    pytestmark = pytest.mark.anyio
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture(params=STORES)
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        options = {} if request.param.startswith("sqlalchemy") else {"max_size": 4}
        store, sa_engine = open_store(request, request.param, **options)
        try:
            assert await store.add_search_index("payload")
            assert await store.add_search_index("error", create_extension=True)
            states = await store.search_indexes()
            assert [(s.name, s.state) for s in states] == [
                ("payload", "present"),
                ("error", "present"),
            ]
            yield store
        finally:
            try:
                assert await store.drop_search_index("payload")
                assert await store.drop_search_index("error")
            finally:
                await close_store(store, sa_engine)
