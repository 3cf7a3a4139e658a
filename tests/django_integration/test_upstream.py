"""Django's own tests of the tasks framework, adapted to ``SkiplockBackend`` (see
``upstream.py``): every test runs, except those in :data:`EXCLUDED`, which are expected to
fail (strict xfail: one that starts passing must leave the list). docs/django.md lists
the same, with the same reasons ("Differences from Django's reference backends")."""

from __future__ import annotations

import importlib
import sys
import unittest
from pathlib import Path
from typing import Any

import pytest

from tests.django_integration.upstream import prepare

#: Why a backend identity test cannot pass on another backend.
IDENTITY = "asserts the backend's class (DummyBackend/ImmediateBackend) or its empty OPTIONS"
#: The database is refused in an event loop.
SYNC_IN_ASYNC = (
    "calls the sync get_result()/refresh() inside an async test: Django refuses a "
    "database query in an event loop (SynchronousOnlyOperation); aget_result()/arefresh() work"
)
#: Left out, by module, class and test, with the reason.
EXCLUDED: dict[str, str] = {
    "test_immediate_backend.ImmediateBackendTestCase.test_using_correct_backend": IDENTITY,
    "test_immediate_backend.ImmediateBackendTestCase.test_throws_keyboard_interrupt": (
        "a task's KeyboardInterrupt is a failed attempt: the worker, not the caller, runs it"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_get_result": (
        "skiplock supports get_result()"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_refresh_result": (
        "skiplock supports refresh()"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_pass_run_after": (
        "skiplock supports run_after"
    ),
    "test_immediate_backend.ImmediateBackendTransactionTestCase"
    ".test_doesnt_wait_until_transaction_commit_by_default": (
        "the job is written in the atomic() block: a worker sees it once the block commits"
    ),
    "test_tasks.TaskTestCase.test_using_correct_backend": IDENTITY,
    "test_tasks.TaskTestCase.test_get_backend": IDENTITY,
    "test_tasks.TaskTestCase.test_refresh_result": SYNC_IN_ASYNC,
    "test_tasks.TaskTestCase.test_get_missing_result": SYNC_IN_ASYNC,
    "test_dummy_backend.DummyBackendTestCase.test_using_correct_backend": IDENTITY,
    "test_dummy_backend.DummyBackendTestCase.test_refresh_result": (
        "changes a TaskResult object DummyBackend keeps and expects refresh() to return it: "
        "a database backend reads results from the database"
    ),
    "test_dummy_backend.DummyBackendTestCase.test_refresh_result_async": (
        "changes a TaskResult object DummyBackend keeps and expects arefresh() to return it: "
        "a database backend reads results from the database"
    ),
    "test_dummy_backend.DummyBackendTestCase.test_get_missing_result": SYNC_IN_ASYNC,
}

#: The adapted modules whose test cases run here.
TEST_MODULES = ("test_tasks", "test_immediate_backend", "test_dummy_backend")


def _load() -> dict[str, Any]:
    folder = str(prepare())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    found: dict[str, Any] = {}
    for name in TEST_MODULES:
        module = importlib.import_module(f"tasks.{name}")
        for attribute, value in vars(module).items():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and issubclass(value, unittest.TestCase)
            ):
                found[f"{name}.{attribute}"] = value
    for path, reason in EXCLUDED.items():
        module_name, class_name, test = path.split(".")
        case = found[f"{module_name}.{class_name}"]
        method = getattr(case, test)
        setattr(case, test, pytest.mark.xfail(reason=reason, strict=True)(method))
    return found


# Collected by pytest as module attributes (unittest classes), under unique names.
for _path, _case in _load().items():
    _name = _path.replace(".", "__")
    globals()[_name] = type(_name, (_case,), {"__module__": __name__})
del _path, _case, _name
pytestmark = pytest.mark.postgres


def test_docs_list_every_test_left_out() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text()
    section = " ".join(text.split("## Differences from Django's reference backends", 1)[1].split())
    for path in EXCLUDED:
        module, case, test = path.split(".")
        assert f"`{module}.py` `{case}.{test}`" in section, path
