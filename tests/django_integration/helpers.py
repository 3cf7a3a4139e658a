"""Helpers of the Django integration tests (imported as ``tests.django_integration.helpers``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from django.db import connection
from django.tasks import task_backends

from skiplock.core import Job as CoreJob
from skiplock.integrations.django import SkiplockBackend
from tests.pghelpers import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.django_integration.settings"

#: skiplock's job results (Job.result, errors, started_at) are merged; the tests that
#: read a return value or the recorded errors are expected to fail before.
HAS_RESULTS = "result" in {field.name for field in attrs.fields(CoreJob)}
requires_results = pytest.mark.xfail(
    not HAS_RESULTS, reason="needs skiplock's job results", strict=True
)


def backend(alias: str = "default") -> SkiplockBackend:
    """The skiplock backend ``alias`` of this thread."""
    found = task_backends[alias]
    assert isinstance(found, SkiplockBackend)
    return found


@contextlib.contextmanager
def with_options(**changes: Any) -> Iterator[None]:
    """The default backend with ``OPTIONS`` changed (``SETTINGS`` merged), its pool
    closed at the end."""
    from django.test import override_settings

    from tests.django_integration.settings import TASKS

    default = TASKS["default"]
    options = dict(default["OPTIONS"])
    settings = {**options["SETTINGS"], **changes.pop("SETTINGS", {})}
    options |= {"SETTINGS": settings, **changes}
    with override_settings(TASKS={"default": {**default, "OPTIONS": options}}):
        try:
            yield
        finally:
            backend().close()


def audit_actors(job_id: int | str, action: str) -> set[str]:
    """Who the audit trail names for job ``job_id``'s events whose action has ``action``."""
    from skiplock.integrations.django.models import AuditEvent

    return set(
        AuditEvent.objects.using("default")
        .filter(job_id=int(job_id), action__contains=action)
        .values_list("actor", flat=True)
    )


def run_worker(until: Callable[[], bool], what: str, timeout: float = 20.0, **options: Any) -> None:
    """Run an in-process worker of the default backend until ``until()`` holds."""
    with backend().worker(**options).in_background():
        wait_for(until, timeout, what)


def finished(*results: Any) -> Callable[[], bool]:
    """A condition: every TaskResult of ``results`` has finished (refreshed at each call)."""

    def check() -> bool:
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    return check


@contextlib.contextmanager
def worker_process(
    tmp_path: Path, *arguments: str, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m django skiplock_worker`` on the test database, its output in
    ``tmp_path/worker.log`` (printed if it has a traceback); killed if still running at
    the end."""
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "skiplock_worker", *arguments],
            cwd=ROOT,
            env=django_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        text = log_path.read_text(errors="replace")
        if "Traceback" in text:
            print(f"--- worker.log\n{text}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """SIGTERM ``proc`` and wait for it; its exit status."""
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def django_env(
    extra: Mapping[str, str] | None = None, database: str | None = None
) -> dict[str, str]:
    """The environment of a ``python -m django`` subprocess on the test database (or
    ``database``)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DJANGO_SKIPLOCK_TEST_DB": database or str(connection.settings_dict["NAME"]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **(extra or {}),
    }


def settings_module(folder: Path, name: str, code: str) -> dict[str, str]:
    """A settings module ``name`` in ``folder``: the tests' settings, then ``code``; the
    environment variables running ``python -m django`` with it."""
    (folder / f"{name}.py").write_text(
        f"from tests.django_integration.settings import *  # noqa: F403\n{code}\n",
        encoding="utf-8",
    )
    # The inherited PYTHONPATH too: a run with PYTHONPATH=src tests that skiplock.
    path = os.pathsep.join(filter(None, [str(folder), str(ROOT), os.environ.get("PYTHONPATH")]))
    return {"DJANGO_SETTINGS_MODULE": name, "PYTHONPATH": path}


def django_command(
    *arguments: str, env: Mapping[str, str] | None = None, database: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m django <arguments>`` in a subprocess (on the test database unless
    ``database``); its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "django", *arguments],
        cwd=ROOT,
        env=django_env(env, database=database),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
