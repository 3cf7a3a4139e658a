"""The REST API's one table (no database): the OpenAPI document, the routes every binding
mounts and the sync API's twin table are all the operations of :data:`OPERATIONS`, no
more and no less; each handler answers with what the caller's operator returns."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from fastapi import FastAPI
from flask import Flask

from skiplock import AsyncEngine, Engine, Operator, Settings
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations.fastapi import create_router, mount
from skiplock.integrations.flask import create_blueprint
from skiplock.integrations.rest import OPENAPI_PATH, OPERATIONS, Request, RestApi, openapi_document
from skiplock.integrations.rest import _operations as sync_operations

#: Every operation of the table, as (method, path) -> operation id.
TABLE = {(op.method, op.path): op.id for op in OPERATIONS}


def allow(request: Request, permission: object) -> str:
    return "ops@example.com"


def test_the_document_has_every_operation_of_the_table_and_no_other() -> None:
    document = openapi_document()
    documented = {
        (method.upper(), path): operation["operationId"]
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert documented == TABLE
    assert len(TABLE) == len(OPERATIONS) == len({op.id for op in OPERATIONS})


def test_the_sync_table_is_the_async_one_with_sync_handlers() -> None:
    def spec(op: Any) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(op, recurse=False).items() if k != "handler"}

    assert [spec(op) for op in sync_operations.OPERATIONS] == [spec(op) for op in OPERATIONS]
    assert openapi_document("/x") == sync_operations.openapi_document("/x")


@pytest.mark.parametrize(
    "engine",
    [AsyncEngine(AsyncInMemoryJobStore()), Engine(InMemoryJobStore())],
    ids=["async", "sync"],
)
def test_the_fastapi_router_mounts_exactly_the_table(engine: AsyncEngine | Engine) -> None:
    router = create_router(engine, authorize=allow, include_in_schema=True)
    mounted = {
        (method, route.path): route.name  # type: ignore[attr-defined]
        for route in router.routes
        for method in route.methods  # type: ignore[attr-defined]
    }
    # HEAD answers as GET on every GET route, outside the table and the document.
    by_method = {
        method: {path: name for (m, path), name in mounted.items() if m == method}
        for method in ("GET", "HEAD")
    }
    assert by_method["HEAD"] == by_method["GET"]
    without_head = {key: name for key, name in mounted.items() if key[0] != "HEAD"}
    assert without_head == TABLE | {("GET", OPENAPI_PATH): "skiplock.openapi"}
    app = FastAPI()
    mount(app, router)
    published = {
        (method.upper(), path): operation["operationId"]
        for path, item in app.openapi()["paths"].items()
        for method, operation in item.items()
    }
    assert published == TABLE


def test_the_flask_blueprint_mounts_exactly_the_table() -> None:
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(Engine(InMemoryJobStore()), authorize=allow))
    mounted = {
        (method, rule.rule): rule.endpoint
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }
    expected = {
        (method, path.replace("{job_id}", "<job_id>")): f"skiplock.{op_id}"
        for (method, path), op_id in TABLE.items()
    }
    assert mounted == expected | {("GET", OPENAPI_PATH): "skiplock.openapi"}


@pytest.mark.parametrize(
    ("operation_id", "method", "suffix", "name"),
    [
        ("cancelJob", "POST", "/cancel", "cancel_job"),
        ("failJob", "POST", "/fail", "fail_job"),
        ("retryJob", "POST", "/retry", "retry_job"),
        ("deleteJob", "DELETE", "", "delete_job"),
    ],
)
def test_a_change_answers_with_the_job_the_operator_returned(
    operation_id: str, method: str, suffix: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler reads nothing again: the response is the operator's job as returned
    (marked here by a kind the store never held), changed by the caller's operator."""
    engine = Engine(InMemoryJobStore(), Settings(audit=True))
    job_id = engine.enqueue("report.build", {"n": 1}).id
    if operation_id == "retryJob":
        engine.cancel_job(job_id)
    real = getattr(Operator, name)
    actors: list[str | None] = []

    def marked(ops: Operator, job_id: int, **options: Any) -> Any:
        actors.append(ops.actor)
        return attrs.evolve(real(ops, job_id, **options), kind="returned.by.operator")

    monkeypatch.setattr(Operator, name, marked)
    api = RestApi(engine, authorize=allow)
    path = f"/jobs/{job_id}{suffix}"
    reply = api.handle(operation_id, Request(method, path, path_params={"job_id": str(job_id)}))
    assert reply.status == 200, reply.json()
    assert reply.json()["kind"] == "returned.by.operator"
    assert actors == ["ops@example.com"]
