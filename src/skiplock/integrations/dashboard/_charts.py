"""The charts page: the geometry of its server-rendered SVG charts from a
:class:`~skiplock.core.rules.History` (no JavaScript; the stylesheet colours the
series by class, as the page's Content-Security-Policy allows no inline style).

Pure functions of their arguments, shared by the async and the sync dashboard.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from skiplock.core import ValidationError
from skiplock.core.rules import format_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from skiplock.core.rules import History, HistoryBucket

#: The windows the page offers: the query value, its length and its bucket (at most
#: 96 buckets: a bar stays wider than a pixel at a phone's width). The samples are kept
#: two days (``SAMPLE_RETENTION``), so every window is covered.
WINDOWS: Mapping[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "6h": (timedelta(hours=6), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(minutes=15)),
}
DEFAULT_WINDOW = "1h"
#: The kinds drawn on their own (the busiest); the others are summed as "other".
SERIES = 6
OTHER = "other"

_WIDTH = 600
_HEIGHT = 160


def window(value: str | None) -> tuple[str, timedelta, timedelta]:
    """The window a query asks for (its name, length and bucket): one of
    :data:`WINDOWS`, :data:`DEFAULT_WINDOW` when absent; ValidationError otherwise."""
    name = value or DEFAULT_WINDOW
    if name not in WINDOWS:
        raise ValidationError(f"window must be one of {', '.join(WINDOWS)}, got {name[:20]!r}")
    length, bucket = WINDOWS[name]
    return name, length, bucket


def _series_names(kinds: Sequence[str]) -> list[str]:
    return [*kinds[:SERIES], *([OTHER] if len(kinds) > SERIES else [])]


def _by_series(values: Mapping[str, int] | None, kinds: Sequence[str]) -> dict[str, int] | None:
    """A bucket's per-kind figures folded into the chart's series."""
    if values is None:
        return None
    shown = set(kinds[:SERIES])
    folded: dict[str, int] = {}
    for kind, n in values.items():
        key = kind if kind in shown else OTHER
        folded[key] = folded.get(key, 0) + n
    return folded


def _label(bucket: HistoryBucket) -> str:
    return bucket.start.astimezone(UTC).strftime("%m-%d %H:%M")


def scale(top: float, room: float = _HEIGHT) -> float:
    """Pixels per unit when the largest value, ``top``, fills ``room`` pixels."""
    return room / top if top > 0 else 0.0


#: A value axis has at most this many intervals between its marks; a time axis this many
#: (fewer when they would not fall on bucket edges).
_VALUE_STEPS = 4
_TIME_STEPS = 6


def ticks(top: float, *, whole: bool = False) -> list[float]:
    """The marks of a value axis from 0 up: a round step (1, 2, 2.5 or 5 times a power of
    ten; a whole number when ``whole``) whose last mark is the lowest at or above
    ``top`` within 4 steps (2 at least where one can do as well); ``[0, 1]`` for nothing
    to draw."""
    if top <= 0:
        return [0.0, 1.0]
    magnitude = 10.0 ** math.floor(math.log10(top / _VALUE_STEPS))
    best: tuple[float, bool, float] | None = None
    for power in (magnitude, magnitude * 10):
        for factor in (1, 2, 2.5, 5):
            step = factor * power
            if whole and (step < 1 or step != int(step)):
                continue
            count = math.ceil(top / step - 1e-9)
            if count <= _VALUE_STEPS:
                key = (round(count * step, 10), count < 2, -step)
                best = key if best is None or key < best else best
    step = -best[2] if best is not None else 1.0
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def axis(
    marks: Sequence[float], room: float, label: Callable[[float], str], *, base: float = _HEIGHT
) -> dict[str, Any]:
    """A value axis over ``room`` pixels up from ``base`` whose top is the last of
    ``marks``: pixels per unit, the labels top to bottom, and each mark's y (gridlines)."""
    per_unit = scale(marks[-1], room)
    return {
        "per_unit": per_unit,
        "labels": [label(v) for v in reversed(marks)],
        "grid": [round(base - v * per_unit, 2) for v in reversed(marks)],
    }


def times(start: datetime, end: datetime, buckets: int, width: float) -> dict[str, Any]:
    """A time axis from ``start`` to ``end`` (``buckets`` buckets across ``width``
    pixels): up to 7 evenly spaced marks on bucket edges, their labels (UTC, ``HH:MM``,
    with seconds if a mark has any, the date where it changes from the previous mark's)
    and their x (gridlines)."""
    steps = next((n for n in range(_TIME_STEPS, 1, -1) if buckets % n == 0), 1)
    if buckets > _TIME_STEPS and steps < 3:
        steps = _TIME_STEPS  # no divisor: evenly spaced, between bucket edges
    marks = [(start + (end - start) * i / steps).astimezone(UTC) for i in range(steps + 1)]
    seconds = any(m.second or m.microsecond for m in marks)
    labels: list[str] = []
    for i, mark in enumerate(marks):
        text = mark.strftime("%H:%M:%S" if seconds else "%H:%M")
        if i and mark.date() != marks[i - 1].date():
            text = mark.strftime("%m-%d ") + text
        labels.append(text)
    return {"labels": labels, "grid": [round(width * i / steps, 2) for i in range(steps + 1)]}


def slots(count: int, width: float = _WIDTH) -> tuple[list[float], float]:
    """Where ``count`` bars stand across ``width`` pixels: the x of each, and their width
    (a bar fills the middle 80 % of its slot, and is at least half a pixel wide)."""
    step = width / max(count, 1)
    return [round(i * step + step * 0.1, 2) for i in range(count)], round(max(step * 0.8, 0.5), 2)


def bar(value: float, per_unit: float) -> float:
    """A bar's height for ``value`` at ``per_unit`` pixels per unit: at least a pixel
    unless the value is zero, so that a small count still shows."""
    return max(value * per_unit, 1.0) if value else 0.0


def stacked(history: History) -> dict[str, Any]:
    """Jobs finished per bucket, a bar per bucket stacked by kind (series ``s0`` ... and
    ``other``). The bars come as SVG markup built here (every name escaped): a day of
    buckets is hundreds of elements, which a template loop renders several times slower."""
    names = _series_names(history.kinds)
    css = {name: _css(i, name) for i, name in enumerate(names)}
    buckets = history.buckets
    xs, width = slots(len(buckets))
    totals = [sum(b.finished.values()) for b in buckets]
    values = axis(ticks(max(totals, default=0), whole=True), _HEIGHT, count_label)
    per_unit = values["per_unit"]
    svg: list[str] = []
    for i, b in enumerate(buckets):
        if not totals[i]:
            continue
        parts = _by_series(b.finished, history.kinds) or {}
        x = xs[i]
        title = ", ".join(f"{parts[name]} {name}" for name in names if parts.get(name))
        svg.append(f"<g><title>{escape(_label(b))}: {escape(title)}</title>")
        y = float(_HEIGHT)
        for name in names:
            height = bar(parts.get(name, 0), per_unit)
            if height:
                y -= height
                svg.append(
                    f'<rect class="{css[name]}" x="{x}" y="{y:.2f}" width="{width}"'
                    f' height="{height:.2f}"></rect>'
                )
        svg.append("</g>")
    return {
        "width": _WIDTH,
        "height": _HEIGHT,
        "svg": Markup("".join(svg)),  # every name in it escaped above
        "top": max(totals, default=0),
        "axis": values,
        "legend": [{"name": name, "css": css[name]} for name in names],
    }


def count_label(value: float) -> str:
    """A count as an axis label (``1,500``)."""
    return f"{value:,.0f}"


def _css(index: int, name: str) -> str:
    return "other" if name == OTHER else f"s{index}"


def _polylines(values: Sequence[float | None], per_unit: float, step: float) -> list[str]:
    """SVG polyline points, one line per run of known values (a gap where unknown); a
    run of one value is drawn as a short flat line so that it shows."""
    lines: list[str] = []
    run: list[str] = []
    for i, value in enumerate([*values, None]):
        if value is None:
            if len(run) == 1:
                x, y = run[0].split(",")
                run.append(f"{float(x) + step * 0.5:.2f},{y}")
            if run:
                lines.append(" ".join(run))
            run = []
            continue
        run.append(f"{i * step + step * 0.5:.2f},{_HEIGHT - value * per_unit:.2f}")
    return lines


def lines(
    history: History,
    series: Sequence[tuple[str, str, Callable[[HistoryBucket], float | None]]],
    *,
    unit: Callable[[float], str],
    whole: bool = False,
) -> dict[str, Any]:
    """A line chart: per series (name, css class, the bucket's value or None) its
    polylines on one scale of round marks (whole numbers when ``whole``), which ``unit``
    labels."""
    buckets = history.buckets
    step = _WIDTH / max(len(buckets), 1)
    values = [[pick(b) for b in buckets] for _, _, pick in series]
    top = max((v for row in values for v in row if v is not None), default=0.0)
    marks = ticks(top, whole=whole)
    per_unit = scale(marks[-1])
    drawn = [
        {"name": name, "css": css, "lines": _polylines(row, per_unit, step)}
        for (name, css, _), row in zip(series, values, strict=True)
    ]
    return {
        "width": _WIDTH,
        "height": _HEIGHT,
        "series": drawn,
        "top": unit(marks[-1]),
        "axis": axis(marks, _HEIGHT, unit),
        "empty": not any(s["lines"] for s in drawn),
    }


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return format_duration(timedelta(seconds=value)) if value >= 60 else f"{value:.1f} s"


def page(history: History, name: str) -> dict[str, Any]:
    """What the charts page shows for ``history`` over window ``name``."""
    kinds = _series_names(history.kinds)
    shown = set(history.kinds[:SERIES])

    def due(kind: str) -> Callable[[HistoryBucket], float | None]:
        def pick(b: HistoryBucket) -> float | None:
            if b.due is None:
                return None
            if kind == OTHER:
                return float(sum(n for k, n in b.due.items() if k not in shown))
            return float(b.due.get(kind, 0))

        return pick

    backlog = lines(
        history,
        [(k, _css(i, k), due(k)) for i, k in enumerate(kinds)],
        unit=count_label,
        whole=True,
    )
    rate = lines(
        history,
        [
            (
                "failure rate",
                "bad",
                lambda b: None if b.failure_rate is None else 100 * b.failure_rate,
            )
        ],
        unit=lambda v: f"{v:g} %",
    )
    latency = lines(
        history,
        [("p50", "s0", lambda b: b.claim_p50), ("p99", "bad", lambda b: b.claim_p99)],
        unit=_seconds,
    )
    buckets = history.buckets
    return {
        "page": "charts",
        "window": name,
        "windows": list(WINDOWS),
        "bucket": format_duration(history.bucket),
        "times": times(buckets[0].start, buckets[-1].end, len(buckets), _WIDTH)
        if buckets
        else {"labels": [], "grid": []},
        "first": _label(buckets[0]) if buckets else "",
        "last": buckets[-1].end.astimezone(UTC).strftime("%m-%d %H:%M") if buckets else "",
        "throughput": stacked(history),
        "backlog": backlog,
        "bounded": any(b.due_bounded for b in buckets),
        "sampled": any(b.due is not None for b in buckets),
        "rate": rate,
        "latency": latency,
        "finished": sum(sum(b.finished.values()) for b in buckets),
        "failures": sum(b.failures for b in buckets),
    }
