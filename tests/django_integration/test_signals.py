"""``task_enqueued``, ``task_started`` and ``task_finished``, sent as Django's own
backends send them: the backend's class as sender, the TaskResult as it is then."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from django.tasks import TaskResultStatus
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings

from skiplock.integrations.django import SkiplockBackend
from skiplock.integrations.django._store import DjangoJobStore
from tests.django_integration.helpers import finished, requires_results, run_worker
from tests.django_integration.settings import TASKS
from tests.django_integration.testapp import tasks

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


class Seen:
    """What the receivers got, in order: (signal, sender, a copy of the result's fields)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def receiver(self, name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            with self._lock:
                self.events.append(
                    {
                        "signal": name,
                        "sender": sender,
                        "id": task_result.id,
                        "status": task_result.status,
                        "errors": [e.exception_class_path for e in task_result.errors],
                        "workers": list(task_result.worker_ids),
                        "value": task_result._return_value,
                        "finished_at": task_result.finished_at,
                        "exc_info": sys.exc_info()[0],
                    }
                )

        return receive


@pytest.fixture
def seen() -> Iterator[Seen]:
    found = Seen()
    receivers = [
        (signal, found.receiver(name))
        for signal, name in (
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        )
    ]
    for signal, receiver in receivers:
        signal.connect(receiver)
    yield found
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def test_a_successful_task_sends_enqueued_started_finished(seen: Seen) -> None:
    result = tasks.add.enqueue(2, 3)
    assert [e["signal"] for e in seen.events] == ["enqueued"]
    run_worker(finished(result), "the task")
    assert [e["signal"] for e in seen.events] == ["enqueued", "started", "finished"]
    enqueued, started, ended = seen.events
    assert all(e["sender"] is SkiplockBackend and e["id"] == result.id for e in seen.events)
    assert enqueued["status"] == TaskResultStatus.READY
    assert enqueued["workers"] == []
    assert started["status"] == TaskResultStatus.RUNNING
    assert len(started["workers"]) == 1
    assert ended["status"] == TaskResultStatus.SUCCESSFUL
    assert ended["value"] == 5
    assert ended["finished_at"] is not None
    assert ended["workers"] == started["workers"] == result.worker_ids


def test_a_failed_attempt_is_finished_inside_the_exception_handler(seen: Seen) -> None:
    result = tasks.flaky.enqueue("s", failures=1)
    run_worker(finished(result), "the flaky task")
    names = [e["signal"] for e in seen.events]
    assert names == ["enqueued", "started", "finished", "started", "finished"]
    first, second = seen.events[2], seen.events[4]
    # The first attempt failed with attempts left: the task is ready to run again.
    assert first["status"] == TaskResultStatus.READY
    assert first["errors"][-1] == "builtins.ValueError"
    assert first["exc_info"] is ValueError
    assert first["finished_at"] is None
    assert second["status"] == TaskResultStatus.SUCCESSFUL
    assert second["exc_info"] is None


@requires_results
def test_the_last_failed_attempt_is_failed_with_every_error(seen: Seen) -> None:
    result = tasks.always_fails.enqueue("t")
    run_worker(finished(result), "the failing task")
    ends = [e for e in seen.events if e["signal"] == "finished"]
    assert [e["status"] for e in ends] == [TaskResultStatus.READY, TaskResultStatus.FAILED]
    assert ends[0]["errors"] == ["builtins.KeyError"]
    assert ends[1]["errors"] == ["builtins.KeyError", "builtins.KeyError"]
    starts = [e for e in seen.events if e["signal"] == "started"]
    assert [len(e["workers"]) for e in starts] == [1, 2]


def test_finished_says_what_the_worker_decided_not_a_prediction(seen: Seen) -> None:
    # The task raises JobCancelledError itself: the worker fails the attempt (no shutdown
    # released it), and with one attempt the job is dead. task_finished reads that
    # decision: FAILED with the error, as get_result() then reads the job.
    options = TASKS["default"]["OPTIONS"]
    path = "tests.django_integration.testapp.tasks.cancels_itself"
    once = {**options, "TASKS": {**options["TASKS"], path: {"max_attempts": 1}}}
    with override_settings(TASKS={"default": {**TASKS["default"], "OPTIONS": once}}):
        result = tasks.cancels_itself.enqueue()
        run_worker(finished(result), "the task cancelling itself")
        [ended] = [e for e in seen.events if e["signal"] == "finished"]
        assert ended["status"] == TaskResultStatus.FAILED == result.status
        assert ended["errors"] == ["skiplock.engine._errors.JobCancelledError"]
        assert ended["finished_at"] is not None


def test_a_task_gets_its_history_from_the_claim_not_a_read_per_run(
    seen: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's claims bring each job's earlier errors (Engine(claim_errors=True)):
    # the TaskResult of a run lists them without the runtime reading the job again.
    reads: list[str] = []
    get = DjangoJobStore.get

    def spy(self: DjangoJobStore, job_id: int, **kwargs: Any) -> Any:
        reads.append(threading.current_thread().name)
        return get(self, job_id, **kwargs)

    monkeypatch.setattr(DjangoJobStore, "get", spy)
    test_thread = threading.current_thread().name
    result = tasks.flaky.enqueue("history", failures=1)
    run_worker(finished(result), "the flaky task")
    starts = [e for e in seen.events if e["signal"] == "started"]
    ends = [e for e in seen.events if e["signal"] == "finished"]
    assert [e["errors"] for e in starts] == [[], ["builtins.ValueError"]]
    assert [len(e["workers"]) for e in starts] == [1, 2]
    assert [e["errors"] for e in ends] == [["builtins.ValueError"]] * 2
    assert ends[1]["status"] == TaskResultStatus.SUCCESSFUL
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    # Only the test's own refreshes read the job; no worker thread does.
    assert reads
    assert set(reads) == {test_thread}
