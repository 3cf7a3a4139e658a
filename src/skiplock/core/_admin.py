"""Core value types of the admin reads: job filters, keyset pages, worker registrations
and state counts. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ._types import Job, JobState

if TYPE_CHECKING:
    from collections.abc import Iterable


@attrs.frozen
class JobFilter:
    """Selects jobs for admin operations; ``None`` fields match everything.

    The time ranges are half-open: ``created_since <= created_at < created_before``, and
    the same for ``available_at`` (aware datetimes).

    The search fields (docs/search.md, "The search filters"): ``payload`` selects the
    jobs whose payload contains it (jsonb ``@>``), ``error`` those whose last error or
    any recorded attempt's error holds it (lower case), ``idempotency_key`` the job with
    that key (global or tenant-scoped). ``skiplock.core._search`` holds the rules.
    """

    ids: frozenset[int] | None = None
    states: frozenset[JobState] | None = None
    kinds: frozenset[str] | None = None
    tenants: frozenset[str] | None = None
    priority_min: int | None = None
    priority_max: int | None = None
    created_since: datetime | None = None
    created_before: datetime | None = None
    available_since: datetime | None = None
    available_before: datetime | None = None
    payload: Mapping[str, Any] | None = None
    error: str | None = None
    idempotency_key: str | None = None


@attrs.frozen
class Page:
    """Keyset pagination: ``limit`` jobs ordered by id after the cursor ``after_id``
    (ids above it ascending; with ``descending``, ids below it, largest first)."""

    limit: int = 100
    after_id: int | None = None
    descending: bool = False


#: A store may stop a page's search after reading this many rows per job the page asks
#: for (``Page.limit``), when the filter is one no index serves in id order (pending or
#: succeeded jobs by kind, tenant, priority or time; docs/admin.md, "Lists at any size").
LIST_READ_FACTOR = 20


class JobPage(list[Job]):
    """One keyset page of jobs: a list of jobs ordered by id, and where the search stopped
    if it stopped early.

    ``resume_after`` is None when the page is what the filter has to show: the next page
    starts after its last job (a page shorter than its limit is the last one). It is an id
    when the store stopped reading at its budget (at most ``READ_FACTOR`` rows per
    job asked for) before it found a full page: the page holds every match up to that id,
    and more may follow it; ask for the next page with ``after_id=resume_after``.
    """

    #: The read budget of a bounded search: rows read per job the page asks for.
    READ_FACTOR: ClassVar[int] = LIST_READ_FACTOR

    __slots__ = ("resume_after",)

    def __init__(self, jobs: Iterable[Job] = (), *, resume_after: int | None = None) -> None:
        super().__init__(jobs)
        self.resume_after = resume_after

    def __repr__(self) -> str:
        return f"JobPage({list.__repr__(self)}, resume_after={self.resume_after!r})"

    def next_after(self, limit: int) -> int | None:
        """The cursor of the next page of a page read with ``limit``: ``resume_after``
        when the search stopped early, else the last id of a full page, else None (this
        was the last page)."""
        if self.resume_after is not None:
            return self.resume_after
        return self[-1].id if len(self) >= limit else None

    def shown(self, limit: int) -> tuple[list[Job], int | None]:
        """What a page shows of a page read with ``limit + 1`` (the extra job says
        there is a next page): its first ``limit`` jobs, and the cursor of the next page
        (None: this is the last page). A search the store stopped early continues after
        its ``resume_after``, whatever the page holds."""
        jobs = self[:limit]
        if self.resume_after is not None:
            return jobs, self.resume_after
        return jobs, jobs[-1].id if len(self) > limit else None


@attrs.frozen
class WorkerInfo:
    """A worker's registration row (heartbeats keep it alive)."""

    id: str
    host: str
    pid: int
    kinds: frozenset[str] | None = None
    tenants: frozenset[str] | None = None
    #: How many jobs it runs at once, and the skiplock version it runs (issue 45).
    slots: int | None = None
    version: str | None = None


@attrs.frozen
class StateCount:
    """How many jobs of a kind and tenant are in a state.

    ``oldest_due_age`` is set for ``pending`` only: seconds since the earliest due time
    of these jobs, on the store's clock (how long the longest-waiting due job has waited;
    0.0 when none is due yet). None for every other state.
    """

    state: JobState
    kind: str
    tenant: str | None
    count: int
    oldest_due_age: float | None = None
