"""A view creates a row and enqueues a task in one ``atomic()`` block: both or neither;
a worker started by ``manage.py skiplock_worker`` in a subprocess runs the task."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from django.test import Client

from skiplock.integrations.django.models import Job
from tests.django_integration.helpers import finished, requires_results, stop, worker_process
from tests.django_integration.testapp.models import Order
from tests.django_integration.testapp.tasks import confirm_order
from tests.django_integration.testapp.views import Refused
from tests.pghelpers import wait_for

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


def test_an_error_after_the_enqueue_leaves_neither_the_row_nor_the_job() -> None:
    with pytest.raises(Refused):
        Client().post("/orders/", {"email": "a@example.com", "fail": "1"})
    assert not Order.objects.exists()
    assert not Job.objects.using("default").exists()


def test_success_leaves_both_and_the_worker_command_runs_the_task(tmp_path: Path) -> None:
    with worker_process(tmp_path, "--concurrency", "2") as proc:
        response = Client().post("/orders/", {"email": "b@example.com"})
        assert response.status_code == 200
        order_id, task_id = response.json()["order"], response.json()["task"]
        job = Job.objects.using("default").get(id=int(task_id))
        assert (job.kind, job.tenant) == (confirm_order.module_path, "default")
        result = confirm_order.get_result(task_id)
        wait_for(finished(result), 30, "the worker process to run the task")
        assert result.status == "SUCCESSFUL"
        assert Order.objects.get(id=order_id).confirmed
        assert len(result.worker_ids) == 1
        assert result.enqueued_at is not None
        assert result.finished_at is not None
        assert stop(proc) == 0


@requires_results
def test_get_result_reports_the_return_value_from_the_worker_process(tmp_path: Path) -> None:
    with worker_process(tmp_path) as proc:
        response = Client().post("/orders/", {"email": "c@example.com"})
        order_id, task_id = response.json()["order"], response.json()["task"]
        result = confirm_order.get_result(task_id)
        wait_for(finished(result), 30, "the worker process to run the task")
        assert result.status == "SUCCESSFUL"
        assert result.return_value == {"order": order_id, "email": "c@example.com"}
        assert result.started_at is not None
        assert result.finished_at is not None
        assert result.started_at <= result.finished_at
        assert stop(proc) == 0
