"""The search contract on PostgreSQL with both opt-in search indexes (docs/admin.md,
"Search"): the same answers as without them and as the memory store's. An index changes
how a search reads (a selective one through the index, whole), never what it finds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.testing import Capabilities
from skiplock.testing.contract._search_async import AsyncSearchContract

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres


class TestAsyncPsycopgSearchIndexed(AsyncSearchContract):
    pytestmark = pytest.mark.anyio
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture
    async def store(self, pg_dsn: str) -> AsyncIterator[AsyncPsycopgJobStore]:
        store = AsyncPsycopgJobStore(pg_dsn, max_size=4)
        assert await store.add_search_index("payload")
        assert await store.add_search_index("error", create_extension=True)
        states = await store.search_indexes()
        assert [(s.name, s.state) for s in states] == [("payload", "present"), ("error", "present")]
        try:
            yield store
        finally:
            assert await store.drop_search_index("payload")
            assert await store.drop_search_index("error")
            await store.close()
