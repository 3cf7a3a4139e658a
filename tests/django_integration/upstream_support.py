"""The fixtures Django's own tasks tests run on here (see ``upstream.py``): skiplock
backends in place of Django's reference ones, and the test case class they use."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

from django.db import connection, connections
from django.test import TransactionTestCase

from skiplock.integrations.django import SkiplockBackend
from skiplock.integrations.django._runtime import _runtimes
from tests import pgfixtures

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from django.tasks import Task, TaskResult

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The options of the adapted backends: one attempt, as Django's reference backends make
#: (they never retry), and quick polls.
OPTIONS: dict[str, Any] = {"SETTINGS": {"max_attempts": 1, "poll_interval": 0.05}}


def _with_options(params: dict[str, Any]) -> dict[str, Any]:
    return {**params, "OPTIONS": {**OPTIONS, **params.get("OPTIONS", {})}}


def _off_the_loop(fn: Callable[[], _R]) -> _R:
    """``fn()``, in another thread when called from an event loop (an async test), where
    Django refuses database queries."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()

    def run() -> _R:
        try:
            return fn()
        finally:
            connections.close_all()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


class DummySkiplockBackend(SkiplockBackend):
    """In place of ``DummyBackend``: a ``SkiplockBackend`` (which runs nothing by itself)
    plus the two helpers of ``DummyBackend`` the tests call."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, _with_options(params))

    @property
    def results(self) -> list[TaskResult[..., Any]]:
        """Every task's result, in enqueue order (read on this thread's connection, so
        inside ``atomic()`` the block's own too)."""

        def read() -> list[TaskResult[..., Any]]:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT id FROM {self.config.schema}.jobs ORDER BY id")
                ids = [row[0] for row in cursor.fetchall()]
            return [self.get_result(str(job_id)) for job_id in ids]

        return _off_the_loop(read)

    def clear(self) -> None:
        """Delete every job."""

        def delete() -> None:
            with connection.cursor() as cursor:
                for statement in pgfixtures.empty_statements(self.config.schema):
                    cursor.execute(statement)

        _off_the_loop(delete)


class ImmediateSkiplockBackend(SkiplockBackend):
    """In place of ``ImmediateBackend``: a ``SkiplockBackend`` whose enqueue is followed by
    a worker run (every due task, then return), the result then read again."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, _with_options(params))

    def enqueue(
        self, task: Task[_P, _R], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[_P, _R]:
        result = super().enqueue(task, args, kwargs)
        self.worker().run_until_idle()
        result.refresh()
        return result


class UpstreamTestCase(TransactionTestCase):
    """In place of ``SimpleTestCase`` and ``TransactionTestCase``: database access (the
    backends keep tasks in PostgreSQL, committed for the worker to see), skiplock's
    tables empty at each test's start, the backends' pools closed after each class (the
    test database is dropped at the end)."""

    databases: ClassVar[set[str]] = {"default"}  # type: ignore[misc]

    def _callSetUp(self) -> None:
        with connection.cursor() as cursor:
            for statement in pgfixtures.empty_statements():
                cursor.execute(statement)
        super()._callSetUp()  # type: ignore[misc]

    @classmethod
    def tearDownClass(cls) -> None:
        for runtime in list(_runtimes.values()):
            runtime.close()
        super().tearDownClass()
