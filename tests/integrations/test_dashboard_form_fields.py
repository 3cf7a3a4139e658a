"""A door's own hidden fields in the dashboard's forms (``form_fields``; issue 42, item
6): every form that posts carries the dashboard's CSRF token, then the door's fields
(what the Django binding gives its middleware's token by), and nothing else when the
door adds none. On the in-memory store."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

from skiplock import Engine
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.integrations.dashboard import (
    CSRF_COOKIE,
    CSRF_FIELD,
    Dashboard,
    Permission,
    Request,
    _csrf,
)

ROOT = "/ops"
HOST = "jobs.example"
SECRET = "a-secret-of-the-tests-0123456789"
#: The door's fields: one that depends on the request, one that does not.
DOOR = {"door_token": "from-the-request", "door_mark": "a & b"}


def authorize(request: Request, permission: Permission) -> str:
    return "admin"


def door_fields(request: Request) -> dict[str, str]:
    return {"door_token": request.header("x-door") or "", "door_mark": "a & b"}


def _hidden_fields(html: str) -> list[list[tuple[str, str]]]:
    """Per form that posts, its hidden fields before any other field, in order."""
    forms = re.findall(r'<form method="post".*?</form>', html, flags=re.DOTALL)
    assert forms, html
    return [
        re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form) for form in forms
    ]


TOKEN = _csrf.new_token(SECRET.encode(), "admin")
HEADERS = {"host": HOST, "x-door": DOOR["door_token"], "cookie": f"{CSRF_COOKIE}={TOKEN}"}


@pytest.fixture
def engine() -> Engine:
    engine = Engine(InMemoryJobStore())
    engine.declare_kind("report.build")
    return engine


@pytest.mark.parametrize("with_door", [True, False])
def test_every_form_carries_the_token_then_the_doors_fields(
    engine: Engine, with_door: bool
) -> None:
    job = engine.enqueue("report.build", {}, tenant="acme")
    # The controls page's every form: a pause and a limit to lift, rows to pause.
    engine.pause(tenant="acme")
    engine.set_limit(kind="report.build", rps=1, burst=1)
    dashboard = Dashboard(
        engine,
        authorize=authorize,
        csrf_secret=SECRET,
        form_fields=door_fields if with_door else None,
    )
    expected = [(CSRF_FIELD, TOKEN)]
    if with_door:  # HTML-escaped, as every value
        expected += [("door_token", DOOR["door_token"]), ("door_mark", "a &amp; b")]
    form = {CSRF_FIELD: TOKEN, "job": f"{job.id}.pending", "action": "cancel", "scope": "selected"}
    requests = {
        "job": Request(
            "GET", f"{ROOT}/jobs/{job.id}", headers=HEADERS, path_params={"job_id": str(job.id)}
        ),
        "jobs": Request("GET", f"{ROOT}/jobs", headers=HEADERS),
        "controls": Request("GET", f"{ROOT}/controls", headers=HEADERS),
        # The bulk confirmation: a POST's answer.
        "bulk": Request(
            "POST",
            f"{ROOT}/bulk",
            headers=HEADERS
            | {"origin": f"http://{HOST}", "content-type": "application/x-www-form-urlencoded"},
            body=urlencode(form).encode(),
        ),
    }
    for page, request in requests.items():
        response = dashboard.handle(page, request)
        assert response.status == 200, response.body.decode()
        for fields in _hidden_fields(response.body.decode()):
            assert fields[: len(expected)] == expected, page
            # The door's names appear nowhere else in the form.
            assert not {name for name, _ in fields[len(expected) :]} & DOOR.keys(), page
