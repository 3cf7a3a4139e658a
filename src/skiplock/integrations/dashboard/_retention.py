"""The dashboard's "Retention" page, shared by the async and the sync dashboard: what the
retention view (``engine.retention()``, docs/retention.md) shows, one row per purge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core.rules import format_duration

from ._render import when

if TYPE_CHECKING:
    from skiplock.core.store import Retention, RetentionWindow

#: What each purge removes, as the page names it.
_LABELS = {"jobs": "Succeeded jobs", "audit": "Audit events"}


def page(view: Retention) -> dict[str, Any]:
    """The page's context."""
    return {
        "page": "retention",
        "windows": [_row(w) for w in view.windows],
        "estimated": any(w.estimated for w in view.windows),
    }


def _row(window: RetentionWindow) -> dict[str, str]:
    run = window.last_run
    if window.window is None:
        shown, due = "off", "-"
    else:
        shown = format_duration(window.window)
        due = f"{'~' if window.estimated else ''}{window.due or 0:,}"
    return {
        "name": window.name,
        "label": _LABELS.get(window.name, window.name),
        "window": shown,
        "due": due,
        "last": "never" if run is None else when(run.finished_at),
        "took": "-" if run is None else f"{run.seconds:.2f} s",
        "removed": "-" if run is None else f"{run.removed:,}",
    }
