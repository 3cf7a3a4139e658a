"""Shared pytest configuration."""

from __future__ import annotations

import pytest

pytest_plugins = ["skiplock.testing.plugin", "tests.pgfixtures", "pytester"]


@pytest.fixture
def anyio_backend() -> str:
    """Run anyio tests on asyncio only."""
    return "asyncio"
