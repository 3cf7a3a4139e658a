"""Contract tests of what a job's runs leave behind (async source; ``_results.py`` is its
generated twin).

A success's result, every failed attempt (bounded), when the job first started (X5);
first through the port, then through an engine's worker over the same store (what a
processor returns, a transactional processor's result). Every test runs three times: with
the audit trail off, writing the store's audit table, and calling an audit sink (J10):
what a job records is the same, the audit only adds its events. Mixed into
:class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from ._results_engine_async import AsyncResultsEngineContract
from ._results_port_async import AsyncResultsPortContract


class AsyncResultsContract(AsyncResultsPortContract, AsyncResultsEngineContract):
    """Results, failed attempts and start times of jobs (X5).

    Through the port (:mod:`._results_port_async`), then through an engine's worker
    (:mod:`._results_engine_async`).
    """
