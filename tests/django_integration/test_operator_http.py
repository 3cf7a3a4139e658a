"""The REST API, the dashboard and the probes of a URLconf at the edges of HTTP: bodiless
writes whatever their declared type, paths and methods no route takes (HEAD, OPTIONS),
and Django's database down (docs/django-admin.md, "The REST API, the dashboard and probes")."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection

from tests.django_integration.helpers import with_options
from tests.django_integration.test_operator_urls import API, DASHBOARD, client_of, dead_job, user
from tests.django_integration.testapp import tasks

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


def test_a_bodiless_write_is_taken_whatever_its_declared_type() -> None:
    # Django's runserver declares text/plain on a request without a body (wsgiref).
    writer = client_of(user("writer", "view_job", "change_job"))
    retry = dead_job()  # first: its worker runs what is due
    cancel, fail, delete = (tasks.add.enqueue(1, n) for n in range(3))

    def bodiless(method: str, url: str, content_type: str) -> Any:
        # The test client declares no type on an empty body by itself.
        return writer.generic(method, url, b"", CONTENT_TYPE=content_type)

    answer = bodiless("POST", f"{API}/jobs/{cancel.id}/cancel", "text/plain")
    assert (answer.status_code, answer.json()["state"]) == (200, "cancelled")
    answer = bodiless("POST", f"{API}/jobs/{fail.id}/fail", "application/x-www-form-urlencoded")
    assert (answer.status_code, answer.json()["state"]) == (200, "failed")
    answer = bodiless("POST", f"{API}/jobs/{retry}/retry", "multipart/form-data; boundary=x")
    assert (answer.status_code, answer.json()["state"]) == (200, "pending")
    answer = bodiless("DELETE", f"{API}/jobs/{delete.id}", "text/plain")
    assert (answer.status_code, answer.json()["id"]) == (200, int(delete.id))
    # A form with a body is still refused (the cross-site form check).
    kept = tasks.add.enqueue(2, 2)
    refused = writer.generic(
        "POST", f"{API}/jobs/{kept.id}/cancel", b"a=b", content_type="text/plain"
    )
    assert refused.status_code == 415
    assert tasks.add.get_result(kept.id).status == "READY"


def test_other_paths_and_methods_are_answered_after_the_hook_as_documented() -> None:
    anonymous = client_of(None)
    for method in ("GET", "HEAD", "OPTIONS", "PATCH"):
        for url in (f"{API}/nothing/here", f"{API}/", f"{API}/jobs", f"{DASHBOARD}/nothing"):
            assert anonymous.generic(method, url).status_code == 401, (method, url)
    reader = client_of(user("reader", "view_job"))
    for url in (f"{API}/nothing/here", f"{API}/"):
        missing = reader.get(url)
        assert missing.status_code == 404, url
        assert missing.json()["type"] == "urn:skiplock:problem:not-found", url
    assert reader.get(f"{DASHBOARD}/nothing").status_code == 404
    wrong = reader.generic("PATCH", f"{API}/jobs/7")
    assert wrong.status_code == 405
    assert wrong.json()["type"] == "urn:skiplock:problem:method-not-allowed"
    assert wrong["Allow"] == "DELETE, GET, HEAD, OPTIONS"
    options = reader.options(f"{API}/jobs")
    assert (options.status_code, options["Allow"]) == (204, "GET, HEAD, POST, OPTIONS")
    # HEAD answers as GET, without the body.
    for url in (f"{API}/jobs", f"{API}/health", f"{DASHBOARD}/", "/ops/livez", "/ops/readyz"):
        get, head = reader.get(url), reader.head(url)
        assert (head.status_code, head.content) == (get.status_code, b""), url
        assert head["Content-Type"] == get["Content-Type"], url
    # The probes take no credentials: their OPTIONS and other methods too.
    probe = anonymous.options("/ops/livez")
    assert (probe.status_code, probe["Allow"]) == (204, "GET, HEAD, OPTIONS")
    refused = anonymous.post("/ops/readyz")
    assert (refused.status_code, refused.content, refused["Allow"]) == (
        405,
        b"",
        "GET, HEAD, OPTIONS",
    )


@contextlib.contextmanager
def django_database_down() -> Iterator[None]:
    """Django's connection to its database refused (a port nobody listens on), and the
    backend's own pool too, as when the server is down."""
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    try:
        with with_options(DSN="postgresql://postgres@127.0.0.1:1/none"):
            yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port


def test_a_database_down_is_a_503_with_retry_after_and_the_probes_say_so() -> None:
    reader = client_of(user("reader", "view_job", "change_job"))  # logs in: needs the database
    anonymous = client_of(None)
    with django_database_down():
        for url in (f"{API}/jobs", f"{API}/health", f"{DASHBOARD}/", f"{DASHBOARD}/dead"):
            answer = reader.get(url)
            assert (answer.status_code, answer["Retry-After"]) == (503, "2"), url
        problem = reader.get(f"{API}/health").json()
        assert problem["type"] == "urn:skiplock:problem:unavailable"
        write = reader.post(f"{API}/jobs/1/cancel")
        assert (write.status_code, write["Retry-After"]) == (503, "2")
        # Without a session cookie nothing needs the database: 401 as ever.
        assert anonymous.get(f"{API}/jobs").status_code == 401
        live, ready = anonymous.get("/ops/livez"), anonymous.get("/ops/readyz")
        assert (live.status_code, live.content) == (200, b"ok\n")
        assert (ready.status_code, ready.content) == (503, b"unavailable\n")
    assert reader.get(f"{API}/health").status_code == 200
