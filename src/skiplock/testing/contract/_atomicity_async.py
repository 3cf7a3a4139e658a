"""Contract tests of multi-statement atomicity on the caller's handles (async source;
``_atomicity.py`` is its generated twin).

An operation that takes several statements (``enqueue`` with idempotency keys: an insert,
then a lookup of the keys that already exist) is all or nothing on the caller's handle:
on an ``autocommit()`` connection it runs in a short transaction of its own, in a
``transaction()`` it joins the caller's. To prove the first, a SQL store declares
``Capabilities(fault_injection=True)`` and overrides
:meth:`AsyncAtomicityContract.failing_key_lookup`. Mixed into
:class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import _support_async as kit
from .capabilities import InjectedFault

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from skiplock import core
    from skiplock.ports import AsyncJobStore


def _keyed_batch(held_key: str) -> list[core.EnqueueRequest]:
    """A new key, a key that exists already (so a keyed enqueue needs its second
    statement), and a job without a key."""
    return [
        kit.request(idempotency_key="atomic-new", payload="new"),
        kit.request(idempotency_key=held_key, payload="again"),
        kit.request(payload="plain"),
    ]


class AsyncAtomicityContract(kit.AsyncContractBase):
    """Multi-statement operations on the caller's ``autocommit()`` and ``transaction()``."""

    def failing_key_lookup(self, store: AsyncJobStore) -> AbstractContextManager[None]:
        """Override for a store with ``fault_injection``: a context manager in which the
        store's second statement of a keyed enqueue (looking up keys that exist already)
        raises :class:`~.capabilities.InjectedFault` instead of running."""
        raise NotImplementedError(
            f"{type(self).__name__} must override failing_key_lookup() to inject faults"
        )

    @kit.requires("fault_injection")
    async def test_keyed_enqueue_many_on_an_autocommit_handle_is_all_or_nothing(
        self, store: AsyncJobStore
    ) -> None:
        [held] = await store.enqueue([kit.request(idempotency_key="atomic-held")])
        batch = _keyed_batch("atomic-held")
        async with store.autocommit() as conn:
            with self.failing_key_lookup(store), pytest.raises(InjectedFault):
                await store.enqueue(batch, connection=conn)
            # The insert before the failed lookup was not committed on its own.
            assert kit.ids(await kit.all_jobs(store)) == [held.id]
            # The handle is still usable, outside any transaction: the batch goes through
            # and is visible elsewhere at once.
            results = await store.enqueue(batch, connection=conn)
            assert [r.created for r in results] == [True, False, True]
            assert results[1].id == held.id
            assert sorted(kit.ids(await kit.all_jobs(store))) == sorted(
                [held.id, results[0].id, results[2].id]
            )

    async def test_keyed_enqueue_many_on_an_autocommit_handle_resolves_keys(
        self, store: AsyncJobStore
    ) -> None:
        batch = [kit.request(idempotency_key=f"atomic-{n}", payload=n) for n in range(3)]
        async with store.autocommit() as conn:
            first = await store.enqueue(batch, connection=conn)
            again = await store.enqueue(batch, connection=conn)
        assert [r.created for r in first] == [True, True, True]
        assert [r.id for r in again] == [r.id for r in first]
        assert not any(r.created for r in again)

    @kit.requires("transactions")
    async def test_keyed_enqueue_many_joins_the_callers_transaction(
        self, store: AsyncJobStore
    ) -> None:
        [held] = await store.enqueue([kit.request(idempotency_key="atomic-held")])

        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                results = await store.enqueue(_keyed_batch("atomic-held"), connection=tx)
                assert [r.created for r in results] == [True, False, True]
                raise kit.Rollback

        # Nothing was committed on the caller's behalf: its rollback takes it all back.
        with pytest.raises(kit.Rollback):
            await enqueue_then_fail()
        assert kit.ids(await kit.all_jobs(store)) == [held.id]
