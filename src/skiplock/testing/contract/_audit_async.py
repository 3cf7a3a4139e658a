"""Contract tests of the audit trail (J10) (async source; ``_audit.py`` is its generated
twin).

With ``audit=`` every audited change records exactly one event per job, with its action,
job, kind, tenant and actor, in the change's transaction; without it nothing is
recorded. An audit sink gets the events inside that transaction; a sink that raises undoes
a caller's change and leaves a worker's change standing. Retention purges old events.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from ._audit_events_async import AsyncAuditEventsContract
from ._audit_sinks_async import AsyncAuditSinksContract


class AsyncAuditContract(AsyncAuditEventsContract, AsyncAuditSinksContract):
    """The audit trail: one event per audited change, in the change's transaction.

    The events each change records (:mod:`._audit_events_async`), then transactions,
    sinks and retention (:mod:`._audit_sinks_async`).
    """
