"""The dashboard's layout in a real headless chromium (issue 41, item 12): words stay
whole in the job browser's cells on a 1280 px screen, and every chart has a scale, values
beside the plot from its top to its bottom and the window's times under it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from .test_dashboard_browser import VIEWPORTS, Site, _sample, as_user, site

if TYPE_CHECKING:
    from playwright.sync_api import Locator

pytestmark = pytest.mark.postgres

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


def _check_scale(figure: Locator, values: list[str]) -> None:
    """The figure's plot has the y labels ``values`` (top to bottom), the top one at the
    plot's top edge and the last at its bottom edge, left of it; and two times under it,
    at its left and right edges."""
    plot = _box(figure.locator("svg"))
    ys = figure.get_by_test_id("y-scale").locator("li")
    assert ys.all_inner_texts() == values
    top, bottom = _box(ys.first), _box(ys.last)
    assert abs(top["top"] - plot["top"]) <= 2
    assert abs(bottom["bottom"] - plot["bottom"]) <= 2
    assert max(top["right"], bottom["right"]) <= plot["left"]
    xs = figure.get_by_test_id("x-scale").locator("li")
    assert xs.count() == 2
    first, last = _box(xs.first), _box(xs.last)
    assert all(t.strip() for t in xs.all_inner_texts())
    assert first["top"] >= plot["bottom"]
    assert abs(first["left"] - plot["left"]) <= 2
    assert abs(last["right"] - plot["right"]) <= 2


@pytest.mark.parametrize("screen", list(VIEWPORTS))
def test_every_chart_has_a_scale(site: Site, as_user: Any, screen: str) -> None:
    _sample(site.dsn)
    page = as_user("viewer")
    page.set_viewport_size(VIEWPORTS[screen])
    page.goto(site.page("/"))
    # The overview: succeeded above the axis, failures below, on one scale whose ends
    # are the larger of the two largest bars (the caption's "at most" figures).
    overview = page.get_by_test_id("throughput")
    most = [
        int(n) for n in re.findall(r"at most (\d+)", overview.locator("figcaption").inner_text())
    ]
    assert len(most) == 2
    assert max(most) > 0
    _check_scale(overview, [str(max(most)), "0", str(max(most))])
    page.goto(site.page("/charts"))
    stacked = page.get_by_test_id("throughput-by-kind")
    top = stacked.get_by_test_id("y-scale").locator("li").first.inner_text()
    assert int(top) > 0
    _check_scale(stacked, [top, f"{int(top) / 2:g}", "0"])
    drawn = 1
    for chart in ("backlog", "failure-rate", "claim-latency"):
        figure = page.get_by_test_id(chart)
        if figure.locator("svg").count():
            labels = figure.get_by_test_id("y-scale").locator("li").all_inner_texts()
            assert len(labels) == 3
            _check_scale(figure, labels)
            drawn += 1
    assert drawn >= 2, "the seeded jobs draw the backlog or the failure rate too"
