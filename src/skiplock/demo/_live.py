"""The live view: the worker's events through the Metrics port, and the progress display."""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter, deque
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from skiplock.core import JobState
from skiplock.ports import NoopMetrics

from ._showcase import FINAL_STATES, KINDS

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from skiplock.core import StateCount

#: A table cell: its text, or its text and an ANSI colour (SGR code) to paint it in.
Cell = str | tuple[str, str]

#: How an attempt's outcome reads in the live view; other outcomes are not shown.
_FAILURES = {
    "retry": "attempt failed, will retry after its backoff",
    "dead": "last attempt failed: dead",
    "lost": "lost its claim",
    "error": "outcome could not be written",
}


class DemoEvents(NoopMetrics):
    """What the worker reports (a :class:`skiplock.ports.Metrics`), kept for the live view.

    The async worker calls it in the event loop that also draws the view, so it needs no
    lock.
    """

    def __init__(self, recent: int = 3) -> None:
        #: The last few failed attempts, newest last.
        self.recent: deque[str] = deque(maxlen=recent)
        #: Per kind: attempts that failed and will be retried.
        self.retries: Counter[str] = Counter()
        #: Per kind: claims held back by a token bucket (they use no attempt).
        self.throttled: Counter[str] = Counter()

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        pass  # the view reads running jobs from the store's counts

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        if outcome == "retry":
            self.retries[kind] += 1
        what = _FAILURES.get(outcome)
        if what is not None:
            self.recent.append(f"{kind}{f' ({tenant})' if tenant else ''}: {what}")

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        self.throttled[kind] += 1


@contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep skiplock's log records off stderr meanwhile.

    The view gets its events from :class:`DemoEvents`; a warning printed between two
    frames would tear the one redrawn in place.
    """
    logger = logging.getLogger("skiplock")
    handler = logging.NullHandler()  # also keeps logging's last-resort stderr handler out
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


_COLORS = {
    JobState.PENDING: "33",
    JobState.RUNNING: "36",
    JobState.SUCCEEDED: "32",
    JobState.DEAD: "31",
}
_SHOWN_STATES = (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.DEAD)


class Display:
    """Progress: redrawn in place on a terminal, one line per second otherwise."""

    def __init__(
        self, out: TextIO, *, total: int, live: bool, events: DemoEvents | None = None
    ) -> None:
        self.out = out
        self.total = total
        self.events = events if events is not None else DemoEvents()
        self.enabled = live
        self.tty = live and _isatty(out)
        self.color = self.tty and "NO_COLOR" not in os.environ
        self.fancy = self.tty and "utf" in (getattr(out, "encoding", None) or "").lower()
        self.interval = 0.1
        self._drawn = 0  # lines of the last frame, to move back over them
        self._next_line = 0.0
        if self.tty:
            out.write("\x1b[?25l")  # hide the cursor while redrawing

    def show(self, counts: Iterable[StateCount], elapsed: float, *, final: bool) -> None:
        """Draw the progress for these state counts."""
        if not self.enabled:
            return
        per_kind: dict[str, Counter[JobState]] = {kind: Counter() for kind in KINDS}
        totals: Counter[JobState] = Counter()
        for c in counts:
            per_kind.setdefault(c.kind, Counter())[c.state] += c.count
            totals[c.state] += c.count
        done = sum(n for state, n in totals.items() if state in FINAL_STATES)
        if self.tty:
            self._frame(per_kind, done, elapsed)
        elif final or elapsed >= self._next_line:
            self._next_line = elapsed + 1.0
            states = "  ".join(f"{state} {totals[state]}" for state in _SHOWN_STATES)
            self.out.write(f"  {elapsed:5.1f}s  {self._bar(done, 20)}  {states}\n")
        self.out.flush()

    def _frame(self, per_kind: Mapping[str, Counter[JobState]], done: int, elapsed: float) -> None:
        events = self.events
        rows: list[list[Cell]] = [
            [
                kind,
                *(self._paint(state, counts[state]) for state in _SHOWN_STATES),
                str(events.retries[kind]),
                str(events.throttled[kind]),
            ]
            for kind, counts in per_kind.items()
        ]
        headers = ["kind", *(str(state) for state in _SHOWN_STATES), "retries", "throttled"]
        lines = [f"  {self._bar(done, 30)}  {elapsed:4.1f}s", ""]
        lines += table(headers, rows, "lrrrrrr")
        lines += ["", "  recent failures:" if events.recent else ""]
        # A wrapped line would break moving back over the frame: cut to the terminal width.
        width = shutil.get_terminal_size().columns - 1
        lines += [cut(f"    {event}", width) for event in events.recent]
        back = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
        self.out.write(back + "".join(line + "\n" for line in lines))
        self._drawn = len(lines)

    def _bar(self, done: int, width: int) -> str:
        filled = width * done // self.total if self.total else width
        full, empty = ("\u2588", "\u2591") if self.fancy else ("#", "-")
        return f"[{full * filled}{empty * (width - filled)}] {done}/{self.total} done"

    def _paint(self, state: JobState, count: int) -> Cell:
        if not self.color or not count:
            return str(count)
        return str(count), _COLORS[state]

    def close(self) -> None:
        """Show the cursor again."""
        if self.tty:
            self.out.write("\x1b[?25h")
            self.out.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], align: str) -> list[str]:
    """Columns aligned per ``align`` ('l'/'r' per column); the last column is not padded."""
    cells: list[Sequence[Cell]] = [headers, *rows]
    widths = [max(len(_text(row[i])) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[Cell]) -> str:
        parts = []
        for cell, width, side in zip(row, widths, align, strict=True):
            text = _text(cell)
            pad = " " * (width - len(text))
            # Painted after measuring: the escape codes take no room on the screen.
            shown = text if isinstance(cell, str) else f"\x1b[{cell[1]}m{text}\x1b[0m"
            parts.append(pad + shown if side == "r" else shown + pad)
        return ("  " + "  ".join(parts)).rstrip()

    return [line(row) for row in cells]


def _text(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def cut(text: str, limit: int) -> str:
    """``text``, shortened with an ellipsis to at most ``limit`` characters."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
