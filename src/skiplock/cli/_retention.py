"""``retention``: what each retention purge removes next and how its last run went (the
retention view, docs/retention.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.core.rules import format_duration

from ._output import print_json, table, time

if TYPE_CHECKING:
    import argparse

    from skiplock.core.store import RetentionWindow

    from ._database import Reached


def run(reached: Reached, args: argparse.Namespace) -> int:
    view = reached.reads().retention()
    if args.json:
        print_json(view.to_dict())
        return 0
    rows = [_row(w) for w in view.windows]
    headers = ["PURGE", "WINDOW", "DUE NOW", "LAST RUN", "TOOK", "REMOVED"]
    print(f"retention as of {time(view.now)}:")
    print(table(headers, rows, right={2, 4, 5}))
    return 0


def _row(window: RetentionWindow) -> list[str]:
    """One purge: its window (off: none), the rows due (``~`` before an estimate), its
    last run."""
    if window.window is None:
        shown, due = "off", "-"
    else:
        shown = format_duration(window.window)
        due = f"{'~' if window.estimated else ''}{window.due:,}"
    run = window.last_run
    if run is None:
        return [window.name, shown, due, "never", "-", "-"]
    return [
        window.name,
        shown,
        due,
        time(run.finished_at),
        f"{run.seconds:.2f} s",
        f"{run.removed:,}",
    ]
