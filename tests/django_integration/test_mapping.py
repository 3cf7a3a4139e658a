"""The mapping of jobs to Django's results: statuses, errors from the stored text, and
what ``validate_task`` refuses (no worker, no database)."""

from __future__ import annotations

import pytest
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask
from django.test import override_settings

from skiplock.core import Bury, JobState, RetryPolicy, stale_error, undecodable_error
from skiplock.core._failure import FailureKind, decide_failure
from skiplock.engine import JobTimeoutError
from skiplock.engine.worker._runner import format_error
from skiplock.integrations.django import error_from_text
from skiplock.integrations.django._results import (
    OTHER_ERROR_CLASS,
    STATUS,
    error_from_exception,
)
from tests.django_integration.settings import TASKS
from tests.django_integration.testapp import tasks


class PartnerDownError(Exception):
    pass


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "path"),
    [
        (ValueError("bad value: x"), "builtins.ValueError"),
        (KeyError("k"), "builtins.KeyError"),
        (RuntimeError(), "builtins.RuntimeError"),
        (PartnerDownError("503\nretry later"), f"{__name__}.PartnerDownError"),
    ],
)
def test_a_stored_exception_maps_as_the_exception_itself(exc: BaseException, path: str) -> None:
    exc = raised(exc)
    from_text = error_from_text(format_error(exc))  # what the worker stores
    assert from_text == error_from_exception(exc)
    assert from_text.exception_class_path == path
    assert "Traceback (most recent call last)" in from_text.traceback
    assert from_text.exception_class is type(exc)


def failure_text(kind: FailureKind, error: str) -> str:
    """The error text skiplock's core stores for a failure of ``kind``."""
    outcome = decide_failure(kind, error, attempt=1, max_attempts=1, retry=RetryPolicy(), jitter=0)
    assert isinstance(outcome, Bury)
    return outcome.error


def test_a_timeout_is_named_alike_in_the_worker_and_in_results() -> None:
    live = error_from_exception(raised(JobTimeoutError("ran longer than 0.2 s")))
    stored = error_from_text(failure_text(FailureKind.TIMEOUT, "ran longer than 0.2 s"))
    assert live.exception_class_path == stored.exception_class_path == "skiplock.JobTimeoutError"
    assert live.exception_class is JobTimeoutError


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (failure_text(FailureKind.TIMEOUT, "ran longer than 0.2 s"), "skiplock.JobTimeoutError"),
        (stale_error("ValueError: x"), OTHER_ERROR_CLASS),
        (undecodable_error("payload", "not JSON"), OTHER_ERROR_CLASS),
        (failure_text(FailureKind.UNDECODABLE, "args: expected a list"), OTHER_ERROR_CLASS),
        (failure_text(FailureKind.UNKNOWN_KIND, "x"), OTHER_ERROR_CLASS),
    ],
)
def test_a_failure_that_is_no_exception_of_the_task(text: str, path: str) -> None:
    error = error_from_text(text)
    assert (error.exception_class_path, error.traceback) == (path, text)
    assert issubclass(error.exception_class, Exception)


def test_every_job_state_has_a_status() -> None:
    assert set(STATUS) == set(JobState)
    finished = {s for s, status in STATUS.items() if status == TaskResultStatus.FAILED}
    assert finished == {JobState.DEAD, JobState.FAILED, JobState.CANCELLED}


@override_settings(TASKS={"default": {**TASKS["default"], "QUEUES": []}})
@pytest.mark.parametrize("queue", ["", "tab\there", "x" * 201])
def test_a_queue_name_that_cannot_be_a_tenant_is_refused(queue: str) -> None:
    with pytest.raises(InvalidTask, match="queue_name"):
        tasks.add.using(queue_name=queue)


def test_the_backend_supports_everything_django_asks_about() -> None:
    backend = tasks.add.get_backend()
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority
