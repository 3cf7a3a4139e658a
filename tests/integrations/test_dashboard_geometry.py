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


def test_a_value_axis_has_round_marks_covering_the_largest_value() -> None:
    assert _charts.ticks(13, whole=True) == [0, 5, 10, 15]
    assert _charts.ticks(7, whole=True) == [0, 2, 4, 6, 8]
    assert _charts.ticks(3, whole=True) == [0, 1, 2, 3]
    assert _charts.ticks(1, whole=True) == [0, 1]  # no half jobs
    assert _charts.ticks(1000, whole=True) == [0, 500, 1000]
    assert _charts.ticks(50.0) == [0, 25, 50]  # a failure rate of 50 %
    assert _charts.ticks(1.37) == [0, 0.5, 1, 1.5]  # seconds
    assert _charts.ticks(0.004) == [0, 0.002, 0.004]
    assert _charts.ticks(0) == [0, 1]  # nothing drawn: still a scale
    for top in (1, 2, 3, 7, 9, 11, 99, 101, 4999, 123_456):
        marks = _charts.ticks(top, whole=True)
        assert marks[0] == 0
        assert marks[-2] < top <= marks[-1]
        assert 2 <= len(marks) <= 5
        assert all(m == int(m) for m in marks)
        assert len({b - a for a, b in itertools.pairwise(marks)}) == 1


def test_the_marks_are_labelled_top_down_on_their_gridlines() -> None:
    axis = _charts.axis([0, 5, 10], 90, _charts.count_label, base=100)
    assert axis["labels"] == ["10", "5", "0"]
    assert axis["grid"] == [10.0, 55.0, 100.0]
    assert axis["per_unit"] == 9.0


def test_a_time_axis_marks_the_window_evenly_on_bucket_edges() -> None:
    start = datetime(2026, 12, 4, 23, 3, tzinfo=UTC)
    hour = _charts.times(start, start + timedelta(hours=1), 60, 600)
    assert hour["labels"] == [
        "23:03", "23:13", "23:23", "23:33", "23:43", "23:53", "12-05 00:03",
    ]  # fmt: skip
    assert hour["grid"] == [0, 100, 200, 300, 400, 500, 600]
    day = _charts.times(start, start + timedelta(hours=24), 96, 600)
    assert day["labels"][1:3] == ["12-05 03:03", "07:03"]  # 4 h apart; the date as it changes
    # Buckets of seconds: the seconds show.
    short = _charts.times(start, start + timedelta(seconds=50), 5, 500)
    assert short["labels"][:2] == ["23:03:00", "23:03:10"]
    # No divisor: evenly spaced all the same.
    assert len(_charts.times(start, start + timedelta(minutes=7), 7, 700)["labels"]) == 7
