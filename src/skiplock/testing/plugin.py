"""Opt-in pytest plugin for skiplock's contract kit.

Enable it in your ``conftest.py``::

    pytest_plugins = ["skiplock.testing.plugin"]

It registers the ``skiplock_requires`` marker and provides the ``clock`` (a fresh
:class:`~skiplock.testing.FakeClock`) and ``anyio_backend`` (``"asyncio"``) fixtures.
"""

from __future__ import annotations

import pytest

from ._clock import FakeClock


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "skiplock_requires(*capabilities): contract test needing these store capabilities; "
        "skipped when the store's Capabilities turn one off",
    )


@pytest.fixture
def clock() -> FakeClock:
    """A fresh fake clock per test."""
    return FakeClock()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Run anyio tests on asyncio (asyncpg needs it)."""
    return "asyncio"
