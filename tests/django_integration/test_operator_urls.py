"""The REST admin API, the dashboard and the probes in a URLconf (``include(...)``): deny
by default, Django's staff users with the job permissions (read vs write), CSRF by
Django's middleware, the user as the audit actor; the probes reveal nothing."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission, User
from django.tasks import TaskResultStatus
from django.test import Client

from tests.django_integration.helpers import audit_actors, backend, with_options
from tests.django_integration.testapp import tasks

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]

API = "/ops/api"
DASHBOARD = "/ops/dashboard"
#: What a browser sends with a same-origin form (the dashboard's own check).
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


def user(name: str, *permissions: str, staff: bool = True) -> User:
    made = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=staff)
    for codename in permissions:
        made.user_permissions.add(
            Permission.objects.get(content_type__app_label="skiplock", codename=codename)
        )
    return made


def client_of(who: User | None, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if who is not None:
        client.force_login(who)
    return client


def post(client: Client, url: str, **extra: Any) -> Any:
    """A POST of the REST API without a body."""
    return client.generic("POST", url, **extra)


def dead_job() -> int:
    result = tasks.always_fails.enqueue("ops")
    # Both attempts: the retry is due after a backoff, so run until the job is dead.
    deadline = time.monotonic() + 30
    while result.status != TaskResultStatus.FAILED:
        assert time.monotonic() < deadline, "the job did not use its attempts in 30 s"
        backend().worker().run_until_idle()
        result.refresh()
    return int(result.id)


def test_everything_is_denied_without_a_logged_in_staff_user() -> None:
    anonymous = client_of(None)
    for url in (f"{API}/jobs", f"{API}/health", f"{API}/openapi.json", f"{DASHBOARD}/"):
        assert anonymous.get(url).status_code == 401, url
    assert post(anonymous, f"{API}/jobs/1/retry").status_code in (401, 403)
    not_staff = client_of(user("visitor", "view_job", "change_job", staff=False))
    assert not_staff.get(f"{API}/jobs").status_code == 403
    assert not_staff.get(f"{DASHBOARD}/").status_code == 403
    no_permission = client_of(user("clerk"))
    assert no_permission.get(f"{API}/jobs").status_code == 403


def test_read_needs_view_job_and_write_change_job() -> None:
    job = tasks.add.enqueue(1, 2)
    reader = client_of(user("reader", "view_job"))
    listed = reader.get(f"{API}/jobs")
    assert listed.status_code == 200
    assert [j["id"] for j in listed.json()["jobs"]] == [int(job.id)]
    assert reader.get(f"{API}/jobs/{job.id}").json()["kind"] == tasks.add.module_path
    assert reader.get(f"{DASHBOARD}/").status_code == 200
    assert post(reader, f"{API}/jobs/{job.id}/cancel").status_code == 403
    writer = client_of(user("writer", "view_job", "change_job"))
    cancelled = post(writer, f"{API}/jobs/{job.id}/cancel")
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["state"] == "cancelled"


def test_unsafe_methods_need_djangos_csrf_token() -> None:
    job = tasks.add.enqueue(1, 2)
    writer = client_of(user("writer", "view_job", "change_job"), csrf=True)
    refused = post(writer, f"{API}/jobs/{job.id}/cancel")
    assert refused.status_code == 403
    assert b"CSRF" in refused.content  # Django's own refusal
    writer.get(f"{DASHBOARD}/")  # any page gives the browser Django's CSRF cookie
    token = writer.cookies["csrftoken"].value
    done = post(writer, f"{API}/jobs/{job.id}/cancel", HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 200, done.content


def test_the_dashboards_buttons_carry_djangos_token_and_pass_both_checks() -> None:
    job_id = dead_job()
    writer = client_of(user("writer", "view_job", "change_job"), csrf=True)
    page = writer.get(f"{DASHBOARD}/jobs/{job_id}")
    assert page.status_code == 200
    html = page.content.decode()
    # Django's token is in every form that posts (the dashboard's form_fields).
    assert html.count('name="csrfmiddlewaretoken"') == html.count('<form method="post"') > 0
    form: dict[str, Any] = {
        "csrfmiddlewaretoken": _field(html, "csrfmiddlewaretoken"),
        "csrf_token": _field(html, "csrf_token"),
        # The state and version the page was rendered for (a stale button gets 409).
        "state": _field(html, "state"),
        "version": _field(html, "version"),
        "next": "job",
    }
    without_django = {key: value for key, value in form.items() if key != "csrfmiddlewaretoken"}
    assert submit(writer, f"{DASHBOARD}/jobs/{job_id}/retry", without_django).status_code == 403
    retried = submit(writer, f"{DASHBOARD}/jobs/{job_id}/retry", form)
    assert retried.status_code == 303, retried.content
    assert tasks.always_fails.get_result(str(job_id)).status == "READY"


def test_the_dashboards_pause_and_resume_pass_both_checks_with_the_user_as_actor() -> None:
    tasks.add.enqueue(1, 1)
    writer = client_of(user("pauser", "view_job", "change_job"), csrf=True)
    html = writer.get(f"{DASHBOARD}/controls").content.decode()
    form = {
        "csrfmiddlewaretoken": _field(html, "csrfmiddlewaretoken"),
        "csrf_token": _field(html, "csrf_token"),
        "kind": "tests.django_integration.testapp.tasks.add",
        "reason": "maintenance",
    }
    without_django = {key: value for key, value in form.items() if key != "csrfmiddlewaretoken"}
    assert submit(writer, f"{DASHBOARD}/controls/pause", without_django).status_code == 403
    assert backend().engine.paused() == []
    paused = submit(writer, f"{DASHBOARD}/controls/pause", form)
    assert paused.status_code == 303, paused.content
    [pause] = backend().engine.paused()
    assert (pause.kind, pause.reason, pause.actor) == (form["kind"], "maintenance", "pauser")
    page = writer.get(f"{DASHBOARD}/controls").content.decode()
    assert f'data-testid="resume-kind-{form["kind"]}"' in page
    del form["reason"]
    assert submit(writer, f"{DASHBOARD}/controls/resume", form).status_code == 303
    assert backend().engine.paused() == []


def test_the_audit_actor_is_the_django_user() -> None:
    with with_options(SETTINGS={"audit": True}):
        job = tasks.add.enqueue(1, 1)
        writer = client_of(user("alice", "view_job", "change_job"))
        assert post(writer, f"{API}/jobs/{job.id}/cancel").status_code == 200
        assert audit_actors(job.id, "cancel") == {"alice"}


def test_the_probes_answer_without_credentials_and_reveal_nothing() -> None:
    anonymous = client_of(None)
    live = anonymous.get("/ops/livez")
    ready = anonymous.get("/ops/readyz")
    assert (live.status_code, live.content) == (200, b"ok\n")
    assert (ready.status_code, ready.content) == (200, b"ok\n")
    with with_options(DSN="postgresql://postgres@127.0.0.1:1/none"):
        down = anonymous.get("/ops/readyz")
        assert (down.status_code, down.content) == (503, b"unavailable\n")  # no cause, no host


def test_a_method_the_path_has_no_route_for_is_405() -> None:
    reader = client_of(user("reader", "view_job"))
    refused = reader.put(f"{API}/jobs")
    assert refused.status_code == 405
    assert refused["Allow"] == "GET, HEAD, POST, OPTIONS"  # as the other bindings say
    assert refused.json()["type"] == "urn:skiplock:problem:method-not-allowed"


def submit(client: Client, url: str, form: dict[str, Any]) -> Any:
    """A dashboard button's POST as a browser sends it (same origin, urlencoded)."""
    return client.post(
        url,
        urlencode(form),
        content_type="application/x-www-form-urlencoded",
        headers=SAME_ORIGIN,
    )


def _field(html: str, name: str) -> str:
    marker = f'name="{name}" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]
