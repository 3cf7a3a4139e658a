"""The retention view (issue 45, point 7; docs/retention.md): per retention purge, how
many rows its window makes due now (what its next run removes) and how its last run went.

A store reads it (``ReadsRole.retention``) for the windows it is given; it records each
run of its ``purge`` and ``purge_audit`` (:class:`PurgeRun`). Pure values, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs

#: The retention purges, by name: succeeded jobs (``Settings.retention``) and audit
#: events (``Settings.audit_retention``).
JOBS_PURGE = "jobs"
AUDIT_PURGE = "audit"
PURGES = (JOBS_PURGE, AUDIT_PURGE)

#: Audit events a SQL store counts one by one before it estimates the rest (an index
#: range of at most this many entries; the estimate is said to be one).
DUE_COUNT_BOUND = 10_000


@attrs.frozen
class PurgeRun:
    """One finished run of a retention purge: when it finished (the store's clock), how
    long it took and how many rows it removed."""

    finished_at: datetime
    seconds: float
    removed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "finished_at": self.finished_at.isoformat(),
            "seconds": self.seconds,
            "removed": self.removed,
        }


@attrs.frozen
class RetentionWindow:
    """One retention purge: its ``window`` (None: off, nothing is due), the rows older
    than it now (``due``: what its next run removes; None when off), whether that is an
    estimate (``estimated``: a SQL store counts audit events exactly up to
    :data:`DUE_COUNT_BOUND`, then estimates), and its last run (None: never ran, as far
    as the store recorded)."""

    name: str
    window: timedelta | None
    due: int | None
    estimated: bool = False
    last_run: PurgeRun | None = None

    def to_dict(self) -> dict[str, Any]:
        """The window as JSON (REST's and the CLI's answer); ``window`` in seconds."""
        return {
            "name": self.name,
            "window": None if self.window is None else self.window.total_seconds(),
            "due": self.due,
            "estimated": self.estimated,
            "last_run": None if self.last_run is None else self.last_run.to_dict(),
        }


@attrs.frozen
class Retention:
    """The retention view as of the store's ``now``: one :class:`RetentionWindow` per
    purge (jobs, then audit events)."""

    now: datetime
    windows: tuple[RetentionWindow, ...]

    def window(self, name: str) -> RetentionWindow:
        """The window of purge ``name`` (``"jobs"`` or ``"audit"``)."""
        return next(w for w in self.windows if w.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"now": self.now.isoformat(), "windows": [w.to_dict() for w in self.windows]}
