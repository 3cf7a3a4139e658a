"""The REST API under a real ``manage.py runserver`` on a free port: its server declares
``text/plain`` on every request without a body (wsgiref), and the bodiless writes
(retry, cancel, mark failed, delete) are taken all the same; HEAD answers as GET."""

from __future__ import annotations

import http.client
import secrets
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.django_integration.helpers import ROOT, django_env, settings_module
from tests.django_integration.test_operator_urls import dead_job
from tests.django_integration.testapp import tasks

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def runserver(tmp_path: Path) -> Iterator[int]:
    """``python -m django runserver`` on the test database and a free port; its port once
    it accepts connections."""
    port = free_port()
    env = settings_module(tmp_path, "runserver_settings", 'ALLOWED_HOSTS = ["127.0.0.1"]')
    log_path = tmp_path / "runserver.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=django_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "runserver did not listen within 60 s"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        print(log_path.read_text(errors="replace"))


def test_bodiless_writes_and_head_under_runserver(runserver: int) -> None:
    writer = User.objects.create_user("writer", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(writer)  # a session row runserver reads (the test commits)
    csrf = secrets.token_hex(16)  # Django takes its 32-character secret in the header too
    cookies = f"sessionid={client.cookies['sessionid'].value}; csrftoken={csrf}"
    retry = dead_job()
    cancel, fail, delete = (tasks.add.enqueue(1, n) for n in range(3))

    def send(method: str, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", runserver, timeout=30)
        try:
            # No body and no Content-Type: runserver declares text/plain itself.
            connection.request(method, path, headers={"Cookie": cookies, "X-CSRFToken": csrf})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    assert send("POST", f"/ops/api/jobs/{cancel.id}/cancel")[0] == 200
    assert send("POST", f"/ops/api/jobs/{fail.id}/fail")[0] == 200
    assert send("POST", f"/ops/api/jobs/{retry}/retry")[0] == 200
    assert send("DELETE", f"/ops/api/jobs/{delete.id}")[0] == 200
    assert [tasks.add.get_result(r.id).status for r in (cancel, fail)] == ["FAILED", "FAILED"]
    assert tasks.always_fails.get_result(str(retry)).status == "READY"
    assert send("GET", f"/ops/api/jobs/{delete.id}")[0] == 404
    assert send("HEAD", "/ops/api/jobs") == (200, b"")
    assert send("HEAD", "/ops/livez") == (200, b"")
