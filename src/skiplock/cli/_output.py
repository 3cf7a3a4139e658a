"""How the commands print: one line per error, aligned tables, JSON."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime

#: Widest a table cell gets (longer text is cut with "…"; ``jobs show`` prints it whole).
MAX_CELL = 60


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks as single spaces."""
    return " ".join(text.split())


def first_line(text: str) -> str:
    """The first non-blank line of ``text`` (an error's summary, not its traceback)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def describe(exc: BaseException) -> str:
    """``exc`` as one line, with the operating system's word for a failed connection
    (e.g. "Connection refused") when the message only gives its number."""
    text = one_line(str(exc))
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            reason = os.strerror(cause.errno)
            if reason.lower() not in text.lower():
                text = f"{text} ({reason})"
            break
        cause = cause.__cause__
    return text


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def cell(value: object, width: int = MAX_CELL) -> str:
    """``value`` as a table cell: one line, at most ``width`` characters."""
    text = "-" if value is None else one_line(str(value))
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: set[int]) -> str:
    """Rows as aligned columns under ``headers`` (columns in ``right`` right-aligned)."""
    lines = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(
            text.rjust(width) if i in right else text.ljust(width)
            for i, (text, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )
