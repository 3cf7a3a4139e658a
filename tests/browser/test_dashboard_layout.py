"""The dashboard's layout in a real headless chromium (issue 41, item 12; issue 45, item
3): words stay whole in the job browser's cells on a 1280 px screen, and every chart has
axes at 1280 and 390 px: a unit, round values beside the plot each on its gridline, and
the window's times under it, evenly spaced on their gridlines."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

import pytest

from .test_dashboard_browser import VIEWPORTS, Site, _sample, as_user, site

if TYPE_CHECKING:
    from playwright.sync_api import Locator

pytestmark = pytest.mark.postgres

#: Between the first and the last time of a window, as the pages write it.
DASH = " \u2013 "

# The fixtures this module shares with test_dashboard_browser.py.
__all__ = ["as_user", "site"]

#: The words of an element's text that the browser laid out on more than one line
#: (text for screen readers only, clipped to a pixel, aside).
BROKEN_WORDS = """root => {
    const broken = [];
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement.closest(".sr")) continue;  // for screen readers only
        for (const match of node.textContent.matchAll(/\\S+/g)) {
            const range = document.createRange();
            range.setStart(node, match.index);
            range.setEnd(node, match.index + match[0].length);
            const lines = new Set([...range.getClientRects()]
                .filter(r => r.width > 0).map(r => Math.round(r.top)));
            if (lines.size > 1) broken.push(match[0]);
        }
    }
    return broken;
}"""


@pytest.mark.parametrize("state", ["", "dead", "pending", "succeeded"])
def test_words_stay_whole_in_the_job_browser_at_1280_px(
    site: Site, as_user: Any, state: str
) -> None:
    page = as_user("admin")  # a writer: the widest table, with the select column
    page.set_viewport_size(VIEWPORTS["desktop"])
    page.goto(site.page(f"/jobs?state={state}" if state else "/jobs"))
    table = page.get_by_test_id("jobs")
    assert table.locator("tbody tr").count() > 0
    assert table.evaluate(BROKEN_WORDS) == []


def _box(locator: Locator) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None
    return {
        "left": box["x"],
        "right": box["x"] + box["width"],
        "top": box["y"],
        "bottom": box["y"] + box["height"],
    }


#: Where each time's text stands on the screen (its box, which may be wider than its text).
TEXT_BOXES = """xs => xs.map(x => {
    const range = document.createRange();
    range.selectNodeContents(x);
    const r = range.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
            shown: getComputedStyle(x).visibility === "visible"};
})"""


def _check_times(xs: Locator, plot: dict[str, float], columns: list[float]) -> None:
    """The times ``xs`` stand under the plot, the first's text starting at its left edge,
    the last's ending at its right edge, the others' centred on their gridlines
    (``columns``, pixels from the left edge); the ones shown do not overlap."""
    boxes = xs.evaluate_all(TEXT_BOXES)
    assert all(b["top"] >= plot["bottom"] for b in boxes)
    assert abs(boxes[0]["left"] - plot["left"]) <= 2
    assert abs(boxes[-1]["right"] - plot["right"]) <= 2
    for box, column in list(zip(boxes, columns, strict=True))[1:-1]:
        assert abs((box["left"] + box["right"]) / 2 - (plot["left"] + column)) <= 2
    shown = [b for b in boxes if b["shown"]]
    assert len(shown) >= 3
    assert all(a["right"] < b["left"] for a, b in itertools.pairwise(shown))


def _check_scale(figure: Locator, values: list[str]) -> list[str]:
    """The figure's plot has the y labels ``values`` (top to bottom) left of it, each
    centred on its horizontal gridline, a unit over them; and times under it, one per
    vertical gridline, evenly spaced (the first at the plot's left edge, the last at its
    right edge, the others about their gridlines), the ones shown not overlapping.
    Returns the times."""
    svg = figure.locator("svg")
    plot = _box(svg)
    width, height = (float(v) for v in (svg.get_attribute("viewBox") or "").split()[2:])
    grid = svg.locator("line.grid").evaluate_all(
        "lines => lines.map(l => [l.getAttribute('x1'), l.getAttribute('y1'),"
        " l.getAttribute('x2'), l.getAttribute('y2')].map(Number))"
    )
    levels = [y1 for x1, y1, x2, y2 in grid if y1 == y2]
    columns = [x1 for x1, y1, x2, y2 in grid if x1 == x2]
    assert figure.get_by_test_id("y-unit").inner_text().strip()
    ys = figure.get_by_test_id("y-scale").locator("li")
    assert ys.all_inner_texts() == values
    assert len(levels) == len(values)
    for label, level in zip(ys.all(), levels, strict=True):
        box = _box(label)
        assert box["right"] <= plot["left"]
        middle = (box["top"] + box["bottom"]) / 2
        assert abs(middle - (plot["top"] + level * (plot["bottom"] - plot["top"]) / height)) <= 2
    xs = figure.get_by_test_id("x-scale").locator("li")
    times: list[str] = xs.all_text_contents()  # a phone hides every other one
    assert len(times) == len(columns) >= 3
    assert all(re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d(:\d\d)?", t) for t in times), times
    steps = {round(b - a, 2) for a, b in itertools.pairwise(columns)}
    assert len(steps) == 1  # evenly spaced
    gridlines = [c * (plot["right"] - plot["left"]) / width for c in columns]
    _check_times(xs, plot, gridlines)
    # The time where the date changes carries the date ("12-08 00:00"; a window of at most
    # a day crosses one midnight): wherever that wider time falls, it stays on its gridline
    # and the others keep their places.
    plain = [t.rsplit(" ", 1)[-1] for t in times]
    for dated in range(1, len(plain)):
        texts = [f"12-31 {t}" if i == dated else t for i, t in enumerate(plain)]
        xs.evaluate_all("(xs, texts) => xs.forEach((x, i) => { x.textContent = texts[i]; })", texts)
        _check_times(xs, plot, gridlines)
    xs.evaluate_all("(xs, texts) => xs.forEach((x, i) => { x.textContent = texts[i]; })", times)
    return times


@pytest.mark.parametrize("screen", list(VIEWPORTS))
def test_every_chart_has_axes_units_and_the_windows_times(
    site: Site, as_user: Any, screen: str
) -> None:
    _sample(site.dsn)
    page = as_user("viewer")
    page.set_viewport_size(VIEWPORTS[screen])
    page.goto(site.page("/"))
    # The overview: succeeded above the axis, failures below, on one scale of round
    # marks whose ends cover the larger of the two largest bars (the caption's figures).
    overview = page.get_by_test_id("throughput")
    caption = overview.locator("figcaption").inner_text()
    most = [int(n) for n in re.findall(r"at most (\d+)", caption)]
    assert len(most) == 2
    assert max(most) > 0
    labels = overview.get_by_test_id("y-scale").locator("li").all_inner_texts()
    top = int(labels[0])
    assert top >= max(most)
    half = len(labels) // 2
    assert labels[half] == "0"
    assert labels == labels[::-1]  # the same marks up and down
    marks = [int(v) for v in labels[:half]]
    assert len({a - b for a, b in itertools.pairwise(marks)}) == 1  # evenly spaced
    times = _check_scale(overview, labels)
    # The window's times: from its first bucket to the end of its last (the caption's).
    assert f"{times[0]}:00{DASH}" in caption
    assert f"{DASH}{times[-1]}:00 UTC" in caption
    page.goto(site.page("/charts"))
    window = page.get_by_test_id("windows").inner_text()
    stacked = page.get_by_test_id("throughput-by-kind")
    labels = stacked.get_by_test_id("y-scale").locator("li").all_inner_texts()
    assert int(labels[0].replace(",", "")) > 0
    assert labels[-1] == "0"
    times = _check_scale(stacked, labels)
    assert f"{times[0]}{DASH}" in window  # the window's ends, as the page says them
    assert f"{times[-1]} UTC" in window
    assert "per 1m" in window
    assert "jobs per 1m" in stacked.get_by_test_id("y-unit").inner_text()
    drawn = 1
    for chart in ("backlog", "failure-rate", "claim-latency"):
        figure = page.get_by_test_id(chart)
        if figure.locator("svg").count():
            labels = figure.get_by_test_id("y-scale").locator("li").all_inner_texts()
            assert len(labels) >= 2
            _check_scale(figure, labels)
            drawn += 1
    assert drawn >= 2, "the seeded jobs draw the backlog or the failure rate too"
