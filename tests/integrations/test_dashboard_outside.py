"""What the last outside test found in the dashboard and the REST API (issue 41, item
12), on the in-memory store: a writer's error pages, the oldest pending age when nothing
is due, a large JSON number, a deleted job's audit trail, the Origin's scheme, and the
OpenAPI document's bounds and rules."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest

from skiplock import Engine, Settings
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.integrations.dashboard import CSRF_COOKIE, Dashboard, Forbidden, _csrf
from skiplock.integrations.dashboard._render import version
from skiplock.integrations.rest import Permission, Request, Response, RestApi, openapi_document

if TYPE_CHECKING:
    from skiplock.core import Job

ROOT = "/admin/dashboard"
SECRET = "a-secret-of-the-tests-0123456789"
HOST = "jobs.example"
USERS = {"admin": {Permission.READ, Permission.WRITE}, "viewer": {Permission.READ}}


def authorize(request: Request, permission: Permission) -> str | None:
    user = request.header("x-user")
    if user not in USERS:
        return None
    if permission not in USERS[user]:
        raise Forbidden(f"{user} may not {permission.value}")
    return user


@pytest.fixture
def engine() -> Engine:
    engine = Engine(InMemoryJobStore(), settings=Settings(audit=True))
    engine.declare_kind("report.build")
    return engine


@pytest.fixture
def dashboard(engine: Engine) -> Dashboard:
    return Dashboard(engine, authorize=authorize, csrf_secret=SECRET)


@pytest.fixture
def api(engine: Engine) -> RestApi:
    return RestApi(engine, authorize=authorize)


def _get(path: str, user: str = "admin", **params: str) -> Request:
    return Request("GET", ROOT + path, headers={"host": HOST, "x-user": user}, path_params=params)


def _post(
    action: str, job: Job, *, state: str | None = None, scheme: str = "http", **headers: str
) -> Request:
    token = _csrf.new_token(SECRET.encode(), "admin")
    form = {"next": "job", "state": state or job.state.value, "version": version(job)}
    return Request(
        "POST",
        f"{ROOT}/jobs/{job.id}/{action}",
        headers={
            "host": HOST,
            "x-user": "admin",
            "content-type": "application/x-www-form-urlencoded",
            "cookie": f"{CSRF_COOKIE}={token}",
        }
        | headers,
        body=urlencode(form | {"csrf_token": token}).encode(),
        path_params={"job_id": str(job.id)},
        scheme=scheme,
    )


def _identity(response: Response) -> str:
    match = re.search(r'data-testid="identity">([^<]*)<', response.body.decode())
    assert match, response.body.decode()
    return match[1]


# ---- a writer's error pages ----------------------------------------------------------


def test_a_writers_403_and_409_pages_do_not_say_read_only(
    dashboard: Dashboard, engine: Engine
) -> None:
    job = engine.get_job(engine.enqueue("report.build", {}).id)
    refused = dashboard.handle("cancel", _post("cancel", job, **{"sec-fetch-site": "cross-site"}))
    assert refused.status == 403
    assert _identity(refused) == "admin"
    stale = dashboard.handle(
        "retry", _post("retry", job, state="dead", **{"sec-fetch-site": "same-origin"})
    )
    assert stale.status == 409
    assert _identity(stale) == "admin"
    # A reader is still labelled so.
    assert _identity(dashboard.handle("overview", _get("/", "viewer"))) == "viewer (read only)"


# ---- the Origin's scheme --------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "origin", "status"),
    [
        ("https", f"https://{HOST}", 303),
        ("http", f"http://{HOST}", 303),
        ("https", f"http://{HOST}", 403),  # the same host over another scheme
        ("http", f"https://{HOST}", 403),
        ("https", f"https://{HOST}.evil.example", 403),
    ],
)
def test_the_origin_check_compares_the_scheme_too(
    dashboard: Dashboard, engine: Engine, scheme: str, origin: str, status: int
) -> None:
    job = engine.get_job(engine.enqueue("report.build", {}).id)
    response = dashboard.handle("cancel", _post("cancel", job, scheme=scheme, origin=origin))
    assert response.status == status, response.body.decode()


# ---- the oldest pending job --------------------------------------------------------------


def test_oldest_pending_is_a_dash_when_nothing_is_due(dashboard: Dashboard, engine: Engine) -> None:
    engine.enqueue("report.build", {}, delay=3600)
    html = dashboard.handle("overview", _get("/")).body.decode()
    tile = re.search(r'data-testid="oldest-pending">([^<]*)<', html)
    assert tile is not None
    assert tile[1] == "\u2013"  # the en dash of "none"
    assert "0ms" not in html


# ---- a deleted job's audit trail ----------------------------------------------------------


def test_a_discarded_jobs_audit_trail_is_reachable_by_its_id(
    dashboard: Dashboard, api: RestApi, engine: Engine
) -> None:
    job_id = engine.enqueue("report.build", {"n": 7}).id
    engine.operator("alice").delete_job(job_id)

    page = dashboard.handle("job", _get(f"/jobs/{job_id}", job_id=str(job_id)))
    html = page.body.decode()
    assert page.status == 404
    assert 'data-testid="job-gone"' in html
    assert "job_discard" in html
    assert "alice" in html
    # The job browser's id field leads there.
    found = dashboard.handle(
        "jobs",
        Request(
            "GET",
            ROOT + "/jobs",
            query={"id": [str(job_id)]},
            headers={"host": HOST, "x-user": "viewer"},
        ),
    )
    assert found.headers["Location"] == f"{ROOT}/jobs/{job_id}"

    reply = api.handle(
        "getJobAudit",
        Request(
            "GET",
            f"/jobs/{job_id}/audit",
            headers={"x-user": "viewer"},
            path_params={"job_id": str(job_id)},
        ),
    )
    assert reply.status == 200
    body = json.loads(reply.body)
    assert body["job_id"] == job_id
    assert [e["action"] for e in body["audit_trail"]] == ["job_enqueued", "job_discard"]
    assert body["audit_trail"][-1]["actor"] == "alice"


def test_an_id_never_seen_is_still_404(dashboard: Dashboard, api: RestApi) -> None:
    assert dashboard.handle("job", _get("/jobs/999", job_id="999")).status == 404
    request = Request(
        "GET", "/jobs/999/audit", headers={"x-user": "viewer"}, path_params={"job_id": "999"}
    )
    assert api.handle("getJobAudit", request).status == 404


# ---- a large JSON number -------------------------------------------------------------------


def _create(api: RestApi, body: bytes) -> tuple[int, Any]:
    request = Request(
        "POST",
        "/jobs",
        headers={"x-user": "admin", "content-type": "application/json"},
        body=body,
    )
    reply = api.handle("createJob", request)
    return reply.status, json.loads(reply.body)


def test_a_number_beyond_a_double_is_a_clear_422_not_invalid_json(api: RestApi) -> None:
    status, problem = _create(api, b'{"kind": "report.build", "payload": {"n": 1e400}}')
    assert status == 422
    text = json.dumps(problem)
    assert "not valid JSON" not in text
    assert "out of range" in text
    assert problem["errors"][0]["loc"][:2] == ["body", "payload"]
    # Valid large numbers within range are stored as they are.
    status, job = _create(
        api,
        b'{"kind": "report.build", "payload": {"n": 1e308, "i": 123456789012345678901234567890}}',
    )
    assert status == 201
    assert job["payload"] == {"n": 1e308, "i": 123456789012345678901234567890}


# ---- the OpenAPI document --------------------------------------------------------------------


def test_the_openapi_document_states_the_bounds_and_the_rules() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    text = json.dumps(document)
    assert '"ge"' not in text  # JSON Schema says minimum and maximum
    assert '"le"' not in text
    assert schemas["LimitSet"]["properties"]["burst"] == {
        "minimum": 1,
        "maximum": 2**31 - 1,
        "title": "Burst",
        "type": "integer",
    }
    priority = schemas["JobCreate"]["properties"]["priority"]["anyOf"][0]
    assert (priority["minimum"], priority["maximum"]) == (-32768, 32767)
    # available_at or delay, not both; a pause covers a kind or a tenant.
    assert schemas["JobCreate"]["not"]["required"] == ["available_at", "delay"]
    for name in ("PauseCreate", "PauseScope"):
        required = [option["required"] for option in schemas[name]["anyOf"]]
        assert required == [["kind"], ["tenant"]]
