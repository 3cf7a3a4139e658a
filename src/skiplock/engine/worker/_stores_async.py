"""The store roles a worker uses, as one protocol per part (async source; ``_stores.py``
is the sync twin). A part of the worker is typed by the roles it calls, no more
(docs/architecture.md, "The store by role")."""

from __future__ import annotations

from typing import Protocol

from skiplock.ports import AsyncJobsRole, AsyncReadsRole, AsyncUpkeepRole, AsyncWorkersRole


class AsyncClaimStore(AsyncJobsRole, AsyncWorkersRole, Protocol):
    """Jobs and workers: what the dispatcher claims with (claim, start, next due)."""


class AsyncWorkerStore(AsyncClaimStore, AsyncReadsRole, AsyncUpkeepRole, Protocol):
    """Every role a worker uses: jobs and workers, the reads of its controls and counts,
    and the roll-up of the counts (upkeep)."""
