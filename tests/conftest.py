"""Shared pytest configuration."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

pytest_plugins = ["skiplock.testing.plugin", "tests.pgfixtures", "pytester"]

# The Django integration's tests need Django 6 (Python 3.12+) and pytest-django, which
# `tox -e django` installs; a plain `pytest` elsewhere leaves them out.
collect_ignore = (
    [] if find_spec("django") and find_spec("pytest_django") else ["django_integration"]
)


@pytest.fixture
def anyio_backend() -> str:
    """Run anyio tests on asyncio only."""
    return "asyncio"
