"""``skiplock_worker`` (signals, start-up failures, ``--until-idle``), ``skiplock_schema``
and ``skiplock_health``; ``manage.py skiplock <command>``."""

from __future__ import annotations

import json
import signal
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus

from skiplock.adapters.psycopg import schema_sql
from tests.django_integration.helpers import (
    backend,
    django_command,
    finished,
    settings_module,
    stop,
    worker_process,
)
from tests.django_integration.testapp import tasks
from tests.django_integration.testapp.models import Attempt
from tests.pghelpers import wait_for

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


def started(key: str) -> bool:
    return Attempt.objects.filter(key=key, note="start").exists()


def test_sigterm_lets_the_running_task_finish_then_exits_0(tmp_path: Path) -> None:
    result = tasks.slow.enqueue("drain", 1.0)
    with worker_process(tmp_path) as proc:
        wait_for(lambda: started("drain"), 30, "the slow task to start")
        assert stop(proc) == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert Attempt.objects.filter(key="drain", note="end").exists()


def test_a_second_signal_releases_the_running_task_and_exits_130(tmp_path: Path) -> None:
    result = tasks.slow.enqueue("forced", 2.5)
    with worker_process(tmp_path) as proc:
        wait_for(lambda: started("forced"), 30, "the slow task to start")
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    result.refresh()
    assert result.status == TaskResultStatus.READY  # released: it runs again later
    assert not Attempt.objects.filter(key="forced", note="end").exists()


def test_the_worker_runs_only_the_queues_it_is_given(tmp_path: Path) -> None:
    email = tasks.record.enqueue("queues", "email")
    report = tasks.record.using(queue_name="reports").enqueue("queues", "report")
    # A task's queue is its job's tenant.
    with worker_process(tmp_path, "--tenants", "reports,default") as proc:
        wait_for(finished(report), 30, "the reports task")
        assert stop(proc) == 0
    email.refresh()
    assert email.status == TaskResultStatus.READY


def test_the_worker_takes_djangos_queue_name() -> None:
    email = tasks.record.enqueue("queue-name", "email")
    report = tasks.record.using(queue_name="reports").enqueue("queue-name", "report")
    out = StringIO()
    call_command("skiplock_worker", "--until-idle", "--queue-name", "reports", stdout=out)
    assert "handled 1 job(s)" in out.getvalue()
    email.refresh()
    report.refresh()
    assert (email.status, report.status) == (TaskResultStatus.READY, TaskResultStatus.SUCCESSFUL)
    call_command("skiplock_worker", "--until-idle", "--queue-name", "*", stdout=out)
    email.refresh()
    assert email.status == TaskResultStatus.SUCCESSFUL


def test_queue_name_and_tenants_are_one_choice_of_the_backends_queues() -> None:
    both = django_command("skiplock_worker", "--queue-name", "emails", "--tenants", "default")
    assert both.returncode == 2
    assert "--queue-name: not allowed with argument --tenants" in both.stderr
    typo = django_command("skiplock_worker", "--until-idle", "--queue-name", "emials")
    assert typo.returncode == 2
    assert "'emials' is not a queue of TASKS['default']['QUEUES']: default, emails, reports" in (
        typo.stderr
    )
    with pytest.raises(CommandError, match="'nobody' is not a queue"):
        call_command("skiplock_worker", "--until-idle", "--tenants", "default,nobody")


def test_until_idle_runs_what_is_due_and_returns() -> None:
    result = tasks.add.enqueue(1, 2)
    out = StringIO()
    call_command("skiplock_worker", "--until-idle", stdout=out)
    assert "handled 1 job(s)" in out.getvalue()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_an_unreachable_database_stops_the_worker_with_one_line(tmp_path: Path) -> None:
    env = settings_module(
        tmp_path,
        "unreachable",
        'TASKS["default"]["OPTIONS"]["DSN"] = "postgresql://postgres@127.0.0.1:1/none"',
    )
    done = django_command("skiplock_worker", env=env)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("skiplock: error: cannot start the worker: ")
    assert "127.0.0.1" in line


def test_a_missing_schema_stops_the_worker_with_the_command_to_run(tmp_path: Path) -> None:
    env = settings_module(
        tmp_path, "other_schema", 'TASKS["default"]["OPTIONS"]["SCHEMA"] = "nope"'
    )
    done = django_command("skiplock_worker", env=env)
    assert done.returncode == 1
    assert "schema 'nope' is not installed" in done.stderr
    assert "run `manage.py migrate --database default`" in done.stderr
    assert "skiplock schema apply" not in done.stderr


def test_schema_sql_prints_what_migrate_applies() -> None:
    out = StringIO()
    call_command("skiplock_schema", "sql", stdout=out)
    assert out.getvalue() == schema_sql()
    out = StringIO()
    call_command("skiplock_schema", "sql", "--from", "3", stdout=out)
    assert out.getvalue() == schema_sql(from_version=3)
    err = StringIO()
    with pytest.raises(SystemExit) as raised:
        call_command("skiplock_schema", "sql", "--from", "999", stderr=err)
    assert raised.value.code == 2
    assert err.getvalue().startswith("skiplock: error: --from: ")


def test_schema_status_and_apply() -> None:
    out = StringIO()
    call_command("skiplock_schema", "status", stdout=out)
    assert "status:  up to date" in out.getvalue().splitlines()
    out = StringIO()
    call_command("skiplock_schema", "apply", stdout=out)
    assert out.getvalue().splitlines()[-1] == "schema 'skiplock' is up to date"


def test_health_is_unhealthy_while_due_tasks_have_no_worker() -> None:
    out = StringIO()
    call_command("skiplock_health", stdout=out)
    assert out.getvalue().startswith("status:   healthy")
    tasks.add.enqueue(1, 1)
    out = StringIO()
    with pytest.raises(SystemExit) as raised:
        call_command("skiplock_health", stdout=out)
    assert raised.value.code == 1
    assert "problem:" in out.getvalue()
    assert tasks.add.module_path in out.getvalue()
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("skiplock_health", "--json", stdout=out)
    assert '"healthy": false' in out.getvalue()


def test_a_backend_that_is_not_skiplock_is_refused() -> None:
    with pytest.raises(CommandError, match="nowhere"):
        call_command("skiplock_health", "--backend", "nowhere")


def test_health_names_manage_py_migrate_for_a_missing_schema(tmp_path: Path) -> None:
    env = settings_module(
        tmp_path, "other_schema", 'TASKS["default"]["OPTIONS"]["SCHEMA"] = "nope"'
    )
    done = django_command("skiplock_health", env=env)
    assert done.returncode == 1
    assert "manage.py migrate --database default" in done.stdout + done.stderr


def skiplock(*arguments: str) -> str:
    """``manage.py skiplock <arguments>`` in this process; what it printed."""
    out = StringIO()
    call_command("skiplock", *arguments, stdout=out)
    return out.getvalue()


def test_manage_py_skiplock_runs_the_trees_commands_on_the_backends_engine() -> None:
    result = tasks.add.enqueue(1, 2)
    kind = tasks.add.module_path
    # A command with actions (jobs show), and commands with none.
    shown = json.loads(skiplock("jobs", "show", result.id, "--json"))
    assert (shown["id"], shown["kind"], shown["state"]) == (int(result.id), kind, "pending")
    counts = json.loads(skiplock("counts", "--json"))["counts"]
    assert {"kind": kind, "tenant": "default", "state": "pending", "count": 1} in counts
    # A write, audited with the actor given.
    skiplock("pause", "--kind", kind, "--reason", "maintenance", "--actor", "ops")
    assert kind in skiplock("paused")
    [pause] = backend().engine.paused()
    assert (pause.kind, pause.actor) == (kind, "ops")
    skiplock("resume", "--kind", kind)
    assert backend().engine.paused() == []
    # The worker, with Django's own option after the command.
    assert "handled 1 job(s)" in skiplock("worker", "--until-idle", "-v", "0")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    # The tree's exit statuses: 1 for a job that does not exist.
    with pytest.raises(SystemExit) as raised:
        skiplock("jobs", "show", "999999")
    assert raised.value.code == 1


def test_manage_py_skiplock_worker_takes_djangos_queue_name() -> None:
    with pytest.raises(CommandError, match="'nobody' is not a queue"):
        call_command("skiplock", "worker", "--until-idle", "--queue-name", "nobody")
    with pytest.raises(CommandError, match="not allowed with argument --tenants"):
        call_command("skiplock", "worker", "--queue-name", "emails", "--tenants", "default")
