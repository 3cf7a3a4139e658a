"""Fixtures of the Django integration tests: the project in ``settings.py`` and its test
database made by pytest-django (``migrate`` installs skiplock's schema)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import django
import pytest

# tox sets it (pytest-django reads it at start-up); for a plain `pytest` run, here,
# before the test modules import the project's models.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_integration.settings")
django.setup()

from django.db import connection  # noqa: E402
from django.tasks import task_backends  # noqa: E402

from skiplock.integrations.django import SkiplockBackend  # noqa: E402
from tests import pgfixtures  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session", autouse=True)
def _close_pools(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Close the backends' pools before pytest-django drops the test database."""
    yield
    with django_db_blocker.unblock():
        for alias in task_backends.settings:
            found = task_backends[alias]
            if isinstance(found, SkiplockBackend):
                found.close()


@pytest.fixture
def jobs(transactional_db: None) -> None:
    """A transactional test (the worker and the admin actions see its commits) with
    skiplock's tables empty: Django flushes only the tables it manages."""
    with connection.cursor() as cursor:
        for statement in pgfixtures.empty_statements():
            cursor.execute(statement)
