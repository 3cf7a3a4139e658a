"""The dashboard's bar geometry, shared by the overview's throughput chart and the charts
page's stacked bars (pure functions: no store, no request)."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

from skiplock.core._history import History, HistoryBucket
from skiplock.core._throughput import Throughput, ThroughputBucket
from skiplock.integrations.dashboard import _charts, _render

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _starts(n: int) -> list[datetime]:
    return [NOW - (n - i) * MINUTE for i in range(n)]


def test_slots_share_the_width_and_leave_a_gap_between_bars() -> None:
    xs, width = _charts.slots(4, 600)
    assert xs == [15.0, 165.0, 315.0, 465.0]
    assert width == 120.0
    assert all(b - a > width for a, b in itertools.pairwise(xs))
    # Hundreds of buckets on a phone: a bar stays visible.
    assert _charts.slots(2000, 600)[1] == 0.5
    assert _charts.slots(0, 600) == ([], 480.0)


def test_a_bar_is_a_pixel_at_least_and_the_largest_fills_the_room() -> None:
    per_unit = _charts.scale(1000, 60)
    assert _charts.bar(1000, per_unit) == 60
    assert _charts.bar(1, per_unit) == 1.0  # 0.06 px would not show
    assert _charts.bar(0, per_unit) == 0.0
    assert _charts.scale(0, 60) == 0.0


def test_the_overview_and_the_charts_page_draw_one_series_alike() -> None:
    counts = [0, 3, 1000, 1]
    throughput = Throughput(
        now=NOW,
        bucket=MINUTE,
        buckets=tuple(
            ThroughputBucket(start=s, end=s + MINUTE, succeeded=n)
            for s, n in zip(_starts(len(counts)), counts, strict=True)
        ),
    )
    history = History(
        now=NOW,
        bucket=MINUTE,
        buckets=tuple(
            HistoryBucket(start=s, end=s + MINUTE, finished={"k": n} if n else {}, succeeded=n)
            for s, n in zip(_starts(len(counts)), counts, strict=True)
        ),
        kinds=("k",),
    )
    overview = _render.chart(throughput)
    page = _charts.stacked(history)
    # Each chart's bars stand in the slots of its own width.
    xs, width = _charts.slots(len(counts), overview["width"])
    assert [b["x"] for b in overview["bars"]] == xs
    assert overview["bar_width"] == width
    xs, width = _charts.slots(len(counts), page["width"])
    drawn = re.findall(r'x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="([\d.]+)"', page["svg"])
    assert [float(x) for x, _, _ in drawn] == [x for x, n in zip(xs, counts, strict=True) if n]
    assert {float(w) for _, w, _ in drawn} == {width}
    # The largest bar fills its room on both; the smallest shows as a pixel on both.
    assert [b["up"] for b in overview["bars"]] == [0, 1, overview["axis"], 1]
    heights = [float(h) for _, _, h in drawn]
    assert heights[1] == page["height"]
    assert heights[0] == heights[2] == 1.0
