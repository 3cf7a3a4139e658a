"""Which dead jobs a purge of the dead-letter queue selects, and what it reports
(:meth:`~skiplock.AsyncEngine.purge_dead`); shared by the async source and its sync twin."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from skiplock.core import ValidationError
from skiplock.core.rules import check_available_at, check_job_id, check_text

if TYPE_CHECKING:
    from skiplock.core import Job

#: Dead jobs a purge reads per page, and deletes per statement.
PURGE_BATCH = 500
#: The longest error text a purge searches for.
MAX_ERROR_TEXT = 200


@attrs.frozen
class DeadPurge:
    """What a purge of dead jobs matched and deleted.

    ``matched``: the dead jobs that matched every filter when they were read; ``deleted``:
    how many of them were deleted (fewer when some left the ``dead`` state meanwhile, e.g.
    replayed; 0 for a dry run); ``up_to_id``: the largest matching id, None when none
    matched. Pass it as ``up_to_id`` to the purge that follows a dry run, so that it
    deletes no job that died after the count was shown.
    """

    matched: int
    deleted: int
    up_to_id: int | None

    def to_dict(self) -> dict[str, int | None]:
        """The purge as JSON: ``{"matched", "deleted", "up_to_id"}`` (REST's answer)."""
        return attrs.asdict(self)


@attrs.frozen
class DeadSelection:
    """The filters of a purge that the store's dead-letter view does not apply (kind and
    tenant it does): time of death, error text and the id bound."""

    died_before: datetime | None = None
    error: str | None = None
    up_to_id: int | None = None

    @classmethod
    def checked(
        cls, died_before: datetime | None, error: str | None, up_to_id: int | None
    ) -> DeadSelection:
        """The selection, or ValidationError naming the bad argument."""
        if died_before is not None:
            died_before = check_available_at(died_before, "died_before")
        if error is not None:
            check_text("error", error, max_length=MAX_ERROR_TEXT)
            if not error.strip():
                raise ValidationError("error must be a non-empty text")
        if up_to_id is not None:
            check_job_id("up_to_id", up_to_id)
        return cls(died_before, error, up_to_id)

    def matches(self, job: Job) -> bool:
        """Whether ``job`` (a dead one) is selected: it died before ``died_before``, its
        last error holds ``error`` (ignoring case), its id is at most ``up_to_id``."""
        if self.up_to_id is not None and job.id > self.up_to_id:
            return False
        if self.died_before is not None and (
            job.completed_at is None or job.completed_at >= self.died_before
        ):
            return False
        return self.error is None or self.error.casefold() in (job.last_error or "").casefold()

    def past_bound(self, last_id: int) -> bool:
        """Whether a page ending at ``last_id`` reached the id bound (no page after it can
        hold a selected job)."""
        return self.up_to_id is not None and last_id >= self.up_to_id
