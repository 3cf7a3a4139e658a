"""The REST API's run-time concurrency limits (issue 45) through each binding on
PostgreSQL: set, list and clear a kind's (node, cluster) and a key's limit as the caller,
their problems, and the audit events they leave."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock import Engine, declare
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import ClaimRequest, WorkerInfo
from skiplock.integrations.rest import models

from .rest_support import FLAVOURS, client_for
from .test_rest import problem

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .rest_support import Client

pytestmark = pytest.mark.postgres


@pytest.fixture
def jobs(pg_dsn: str) -> Iterator[Engine]:
    store = PsycopgJobStore(pg_dsn, max_size=2)
    yield Engine(store)
    store.close()


@pytest.fixture(params=FLAVOURS)
def client(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[Client]:
    with client_for(request.param, pg_dsn) as made:
        yield made


def test_concurrency_limits_set_list_clear(client: Client, jobs: Engine) -> None:
    assert client.get("/concurrency").body == {"concurrency": []}
    kind = client.post(
        "/concurrency",
        json={"kind": "mail.send", "limit": 3, "allow_unknown_kind": True},
    )
    assert kind.status == 200, kind.body
    models.ConcurrencyLimit.model_validate(kind.body)
    assert (kind.body["scope"], kind.body["limit"], kind.body["actor"]) == (
        "cluster",
        3,
        "ops@example.com",
    )
    node = {"kind": "mail.send", "scope": "node", "limit": 2, "allow_unknown_kind": True}
    assert client.post("/concurrency", json=node).status == 200
    key = client.post("/concurrency", json={"key": "db:main", "limit": 1})
    assert key.status == 200, key.body
    listed = client.get("/concurrency").body
    models.ConcurrencyLimits.model_validate(listed)
    assert {(c["kind"], c["key"], c["scope"], c["limit"]) for c in listed["concurrency"]} == {
        ("mail.send", None, "cluster", 3),
        ("mail.send", None, "node", 2),
        (None, "db:main", "cluster", 1),
    }
    assert {(c.kind, c.key, c.scope) for c in jobs.concurrency_limits()} == {
        ("mail.send", None, "cluster"),
        ("mail.send", None, "node"),
        (None, "db:main", "cluster"),
    }
    for body in (
        {"limit": 1},
        {"kind": "k", "key": "x", "limit": 1, "allow_unknown_kind": True},
        {"key": "x", "scope": "node", "limit": 1},
        {"kind": "k", "limit": 0, "allow_unknown_kind": True},
        {"kind": "k", "scope": "everywhere", "limit": 1, "allow_unknown_kind": True},
    ):
        problem(client.post("/concurrency", json=body), 422, "invalid-request")
    cleared = client.post("/concurrency/clear", json={"kind": "mail.send", "scope": "node"})
    assert cleared.status == 200
    assert cleared.body["limit"] == 2
    missing = client.post("/concurrency/clear", json={"kind": "mail.send", "scope": "node"})
    problem(missing, 404, "not-found")
    assert client.post("/concurrency/clear", json={"key": "db:main"}).body["key"] == "db:main"
    assert [(c.kind, c.scope) for c in jobs.concurrency_limits()] == [("mail.send", "cluster")]


def test_concurrency_of_an_unknown_kind_is_refused(client: Client) -> None:
    client.engine.declare(declare("email_send"))
    reply = client.post("/concurrency", json={"kind": "emial_send", "limit": 1})
    detail = problem(reply, 422, "invalid-request")["detail"]
    assert "unknown kind 'emial_send'" in detail
    assert client.get("/concurrency").body == {"concurrency": []}


def test_workers_show_their_jobs_and_can_be_drained_or_stopped(
    client: Client, jobs: Engine
) -> None:
    # Issue 45 item 5: what each worker runs (since when), its slots and version; drain
    # or stop it through its row, as the caller.
    info = WorkerInfo(id="host-1/7/w", host="host-1", pid=7, slots=4, version="1.2.3")
    jobs.store.register_worker(info)
    job_id = jobs.enqueue("report.build", {}).id
    assert jobs.store.claim(ClaimRequest(worker_id=info.id, limit=1))
    listed = client.get("/workers").body
    models.Workers.model_validate(listed)
    [worker] = listed["workers"]
    assert (worker["slots"], worker["version"], worker["request"]) == (4, "1.2.3", None)
    assert [(j["id"], j["kind"]) for j in worker["jobs"]] == [(job_id, "report.build")]
    assert worker["jobs"][0]["since"] is not None
    drained = client.post("/workers/drain", json={"worker_id": info.id})
    assert drained.status == 200, drained.body
    models.WorkerRequest.model_validate(drained.body)
    assert (drained.body["action"], drained.body["actor"]) == ("drain", "ops@example.com")
    [worker] = client.get("/workers").body["workers"]
    assert worker["request"]["action"] == "drain"
    stopped = client.post("/workers/stop", json={"worker_id": info.id})
    assert stopped.body["action"] == "stop"
    assert [r.action for r in jobs.store.controls().requests] == ["stop"]
    problem(client.post("/workers/stop", json={"worker_id": "nobody"}), 404, "not-found")
    problem(client.post("/workers/drain", json={}), 422, "invalid-request")
