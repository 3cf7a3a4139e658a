"""What a bulk action bound to a confirmation did: the jobs it changed and the jobs it
skipped, each with why (docs/admin-changes.md, "Act on what was confirmed")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core import JobState

if TYPE_CHECKING:
    from collections.abc import Iterable

#: The most jobs one confirmed bulk action takes (``act_as_confirmed``, a bound
#: ``retry_dead``): the dashboard's bulk actions change at most this many per confirmation.
MAX_CONFIRMED = 10_000


@attrs.frozen
class SkippedJob:
    """A confirmed job a bulk action left alone: its id, its state now (None: it no
    longer exists) and why, in words (``"it is pending now"``, ``"it no longer
    exists"``)."""

    id: int
    state: JobState | None
    reason: str

    def to_json(self) -> dict[str, object]:
        """The JSON form the doors answer with."""
        return {
            "id": self.id,
            "state": None if self.state is None else self.state.value,
            "reason": self.reason,
        }


def skipped_job(job_id: int, state: JobState | None, shown: JobState) -> SkippedJob:
    """Why a job confirmed in ``shown`` was left alone, given its ``state`` now."""
    if state is None:
        return SkippedJob(job_id, None, "it no longer exists")
    if state is shown:  # moved away and back between the check and the change
        return SkippedJob(job_id, state, f"it changed while the action ran (it is {state.value})")
    return SkippedJob(job_id, state, f"it is {state.value} now, not {shown.value}")


class BulkResult(list[int]):
    """The ids a bulk action changed, sorted (a list of ints), and ``skipped``: the
    confirmed jobs it left alone because they changed meanwhile, each with its state now
    and why (:class:`SkippedJob`, by id)."""

    __slots__ = ("skipped",)

    def __init__(self, changed: Iterable[int] = (), skipped: Iterable[SkippedJob] = ()) -> None:
        super().__init__(sorted(changed))
        self.skipped: tuple[SkippedJob, ...] = tuple(sorted(skipped, key=lambda s: s.id))

    def __repr__(self) -> str:
        return f"BulkResult({list.__repr__(self)}, skipped={list(self.skipped)!r})"
