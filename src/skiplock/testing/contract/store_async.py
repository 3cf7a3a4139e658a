"""The job store contract (async source; ``store.py`` is its generated sync twin).

Every store — the in-memory one, each PostgreSQL adapter, yours — must pass these tests.
For an async store subclass ``AsyncJobStoreContract``, for a sync one ``JobStoreContract``
(same tests, plain ``def`` fixture)::

    # conftest.py
    pytest_plugins = ["skiplock.testing.plugin"]

    # test_my_store.py
    from skiplock.testing.contract import AsyncJobStoreContract, Capabilities

    class TestMyStore(AsyncJobStoreContract):
        capabilities = Capabilities(listen_notify=False)

        @pytest.fixture
        async def store(self, clock):
            store = MyStore(...)  # fresh and empty for every test
            yield store
            await store.close()

The tests assert behaviour only (states, ids, counts, fencing, atomicity under
concurrency), never how a store does it. Due times are compared with ``await
store.now()``; only tests marked ``skiplock_requires("controllable_clock")`` move the
``clock`` fixture, which such a store must use as its clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._admin_async import AsyncAdminContract
from ._atomicity_async import AsyncAtomicityContract
from ._audit_async import AsyncAuditContract
from ._claim_async import AsyncClaimContract
from ._completion_async import AsyncCompletionContract
from ._concurrency_async import AsyncConcurrencyContract
from ._controls_async import AsyncControlsContract
from ._enqueue_async import AsyncEnqueueContract
from ._health_async import AsyncHealthContract
from ._history_async import AsyncHistoryContract
from ._idempotency_async import AsyncIdempotencyContract
from ._lifecycle_async import AsyncLifecycleContract
from ._model_check_async import AsyncModelCheckContract
from ._notifier_async import AsyncNotifierContract
from ._rates_async import AsyncRateContract
from ._recount_async import AsyncRecountContract
from ._results_async import AsyncResultsContract
from ._retention_async import AsyncRetentionContract
from ._search_async import AsyncSearchContract
from ._throughput_async import AsyncThroughputContract
from ._timeouts_async import AsyncStatementTimeoutContract
from ._transactions_async import AsyncTransactionContract
from ._worker_requests_async import AsyncWorkerRequestsContract
from ._workers_async import AsyncWorkersContract

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore


class AsyncJobStoreContract(
    AsyncEnqueueContract,
    AsyncIdempotencyContract,
    AsyncClaimContract,
    AsyncRateContract,
    AsyncTransactionContract,
    AsyncAtomicityContract,
    AsyncStatementTimeoutContract,
    AsyncCompletionContract,
    AsyncAdminContract,
    AsyncSearchContract,
    AsyncAuditContract,
    AsyncControlsContract,
    AsyncConcurrencyContract,
    AsyncWorkersContract,
    AsyncWorkerRequestsContract,
    AsyncRetentionContract,
    AsyncHealthContract,
    AsyncThroughputContract,
    AsyncHistoryContract,
    AsyncRecountContract,
    AsyncNotifierContract,
    AsyncLifecycleContract,
    AsyncResultsContract,
    AsyncModelCheckContract,
):
    """Behaviour every job store must have. Subclass it as ``Test...`` and override the
    ``store`` fixture (a fresh, empty store per test); set ``capabilities`` for what your
    store cannot do."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    async def store(self) -> AsyncJobStore:
        """Override me: yield a fresh, empty store (and close it afterwards)."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `store` fixture with one that yields "
            "a fresh, empty store for each test"
        )

    @pytest.fixture(autouse=True)
    def _skiplock_requirements(self, request: pytest.FixtureRequest) -> None:
        for mark in request.node.iter_markers("skiplock_requires"):
            for name in mark.args:
                if not self.capabilities.supports(name):
                    pytest.skip(f"the store does not support {name!r}")

    # ---- lifecycle ----------------------------------------------------------------------

    async def test_close_is_idempotent(self, store: AsyncJobStore) -> None:
        await store.close()
        await store.close()
