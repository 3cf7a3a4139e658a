"""Contract tests of statement timeouts (async source; ``_timeouts.py`` is its generated
twin).

``transaction(statement_timeout=...)`` and ``autocommit(statement_timeout=...)`` bound
every statement of the block, and the bound ends with the block. Only a store that runs
SQL can be asked for that: it declares ``Capabilities(statement_timeouts=True)`` and
overrides :meth:`AsyncStatementTimeoutContract.fetch_value` to run a query on one of its
handles. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

#: Far longer than any timeout below: a statement that ends early was cancelled.
_SLEEP = "SELECT pg_sleep(10)"
_SETTING = "SELECT current_setting('statement_timeout')"
#: The server's message when it cancels a statement for its timeout.
_CANCELLED = "statement timeout"


class AsyncStatementTimeoutContract(kit.AsyncContractBase):
    """Statement timeouts of ``transaction()`` and ``autocommit()`` blocks."""

    async def fetch_value(self, handle: object, query: str) -> object:
        """Override for a store with ``statement_timeouts``: run the SQL ``query`` on a
        handle of the store's ``transaction()`` or ``autocommit()``; return the first
        value of its first row."""
        raise NotImplementedError(
            f"{type(self).__name__} must override fetch_value() to test statement timeouts"
        )

    async def _sleep_in(self, store: AsyncJobStore, block: str, timeout: float) -> None:
        """Sleep longer than ``timeout`` in a ``transaction()`` or ``autocommit()`` block."""
        opened = store.transaction if block == "transaction" else store.autocommit
        async with opened(statement_timeout=timeout) as handle:
            assert await self.fetch_value(handle, _SETTING) == f"{round(timeout * 1000)}ms"
            await self.fetch_value(handle, _SLEEP)

    async def _default(self, store: AsyncJobStore) -> object:
        async with store.autocommit() as conn:
            return await self.fetch_value(conn, _SETTING)

    @kit.requires("statement_timeouts")
    async def test_transaction_statement_timeout_cancels_a_longer_statement(
        self, store: AsyncJobStore
    ) -> None:
        default = await self._default(store)
        started = time.monotonic()
        with pytest.raises(Exception, match=_CANCELLED):
            await self._sleep_in(store, "transaction", 0.2)
        assert time.monotonic() - started < 5
        # The bound ended with the transaction: later blocks are back to the default.
        async with store.transaction() as tx:
            assert await self.fetch_value(tx, _SETTING) == default

    @kit.requires("statement_timeouts")
    async def test_transaction_statement_timeout_lets_shorter_statements_commit(
        self, store: AsyncJobStore
    ) -> None:
        async with store.transaction(statement_timeout=5) as tx:
            await self.fetch_value(tx, "SELECT pg_sleep(0.05)")
            [result] = await store.enqueue([kit.request()], connection=tx)
        assert await store.get(result.id) is not None

    @kit.requires("statement_timeouts")
    async def test_autocommit_statement_timeout_cancels_and_is_restored(
        self, store: AsyncJobStore
    ) -> None:
        default = await self._default(store)
        started = time.monotonic()
        with pytest.raises(Exception, match=_CANCELLED):
            await self._sleep_in(store, "autocommit", 0.2)
        assert time.monotonic() - started < 5
        assert await self._default(store) == default
        async with store.autocommit(statement_timeout=0.5) as conn:
            await self.fetch_value(conn, "SELECT pg_sleep(0.05)")  # shorter: runs
        async with store.transaction() as tx:
            assert await self.fetch_value(tx, _SETTING) == default

    @kit.requires("statement_timeouts")
    @pytest.mark.parametrize("bad", [0, -1.0])
    async def test_statement_timeout_must_be_positive(
        self, store: AsyncJobStore, bad: float
    ) -> None:
        for block in ("transaction", "autocommit"):
            with pytest.raises(core.ValidationError):
                await self._sleep_in(store, block, bad)
