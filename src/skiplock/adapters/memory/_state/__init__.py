"""The in-memory stores' shared state: every operation written once, sync and thread-safe.

Both flavours (``AsyncInMemoryJobStore`` and its generated twin ``InMemoryJobStore``) wrap
one :class:`MemoryState`. An operation holds a ``threading.Lock`` only for in-memory work
(never across an await), so one state may be used from several threads and event loops.

What an operation does to a job (claim, start, outcomes, recovery, operator events, which
jobs a claim takes) is the core's (:mod:`skiplock.core.store`), applied as it is; this
package keeps the rows, their indexes, transactions, workers and the audit table.

One module per role of :mod:`skiplock.ports` (each names the contract-kit mixins that test
it), on top of the shared rows (``_base``) and the transactions (``_transaction``):

========================  ====================  =========================================
module                    role                  kit mixins
========================  ====================  =========================================
``_jobs``                 ``JobsRole``          Enqueue, Idempotency, Claim, Rate,
                                                Completion, Results, Lifecycle
``_transaction``          ``JobsRole``'s        Transaction, Atomicity, StatementTimeout
                          transactions
``_workers``              ``WorkersRole``       Workers, Notifier (Lifecycle in part)
``_controls``             ``ControlsRole``      Controls
``_reads``                ``ReadsRole``         Health, Throughput, Recount, History,
                                                Admin's reads
``_admin``                ``AdminRole``         Admin
``_upkeep``               ``UpkeepRole``        Workers' maintenance and retention,
                                                History's sampling
========================  ====================  =========================================

``AsyncAuditContract`` (J10) spans every role that changes jobs, ``AsyncModelCheckContract``
the whole store.
"""

from __future__ import annotations

from ._admin import AdminState
from ._base import AuditNote
from ._controls import ControlsState
from ._jobs import JobsState
from ._reads import ReadsState
from ._transaction import InMemoryTransaction
from ._upkeep import UpkeepState
from ._workers import WorkersState

__all__ = ["AuditNote", "InMemoryTransaction", "MemoryState"]


class MemoryState(JobsState, WorkersState, ControlsState, ReadsState, AdminState, UpkeepState):
    """Jobs, the idempotency index, worker rows, maintenance runs and the id sequence,
    behind one lock: one part per role of :mod:`skiplock.ports` over shared rows
    (``_base.StateBase``).

    ``now`` always comes from ``clock``. Listeners registered with :meth:`subscribe` are
    called (outside the lock, from the writing thread) after every write that made a job
    claimable: a due job enqueued, replayed, retried/released/recovered into the past.
    """
