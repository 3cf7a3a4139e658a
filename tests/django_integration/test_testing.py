"""What docs/django-admin.md says about testing: skiplock's backend inside a test's
transaction, and Django's immediate backend running the same tasks."""

from __future__ import annotations

import pytest
from django.tasks import TaskResultStatus
from django.test import override_settings

from tests.django_integration.testapp import tasks
from tests.django_integration.testapp.models import Attempt

pytestmark = pytest.mark.postgres


@pytest.mark.django_db  # a TestCase: the test runs in a transaction rolled back after it
def test_enqueue_and_get_result_work_inside_a_test_transaction() -> None:
    result = tasks.record.enqueue("in-test", "x")
    read = tasks.record.get_result(result.id)
    assert (read.status, read.args) == (TaskResultStatus.READY, ["in-test", "x"])


@override_settings(
    TASKS={"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": []}}
)
@pytest.mark.django_db
def test_django_immediate_backend_runs_the_same_tasks_at_once() -> None:
    result = tasks.record.enqueue("immediate", "now")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "now"
    assert Attempt.objects.filter(key="immediate").exists()
