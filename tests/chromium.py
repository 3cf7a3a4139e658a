"""The headless chromium of the browser tests (tests/browser, and the Django dashboard's in
tests/django_integration): Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run``
installs it), or the one ``SKIPLOCK_CHROMIUM`` names, driven by Playwright's Python
client. Playwright never downloads one (``playwright install`` is never run). A missing
browser fails the tests, never skips. No web framework is needed to import this module.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser


def chromium_path() -> str:
    """The chromium executable: ``SKIPLOCK_CHROMIUM``, else ``chromium`` on the PATH."""
    path = os.environ.get("SKIPLOCK_CHROMIUM") or shutil.which("chromium")
    if path is None:
        pytest.fail(
            "no chromium: install Debian's (apt-get install -y chromium, as .ci/run does) "
            "or set SKIPLOCK_CHROMIUM to a chromium executable"
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless chromium for a module. Not for the session: Playwright's sync API runs
    an event loop in this thread until it stops, and tests after this module (asyncio
    ones) need the thread without it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            yield browser
        finally:
            browser.close()
