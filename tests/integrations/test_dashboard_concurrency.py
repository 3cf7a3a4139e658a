"""The dashboard's run-time controls of issue 45 under FastAPI and Flask on the in-memory
store: concurrency limits (item 4) set and cleared from the controls page with the caller
as the actor (a bad limit is a 400, an unknown kind a 422 unless ticked, a reader gets no
form and a 403); the workers page (item 5): what each worker runs, Drain and Stop."""

from __future__ import annotations

import re

import pytest

from skiplock.core import ClaimRequest, WorkerInfo

from .test_dashboard_bindings import MOUNT, _Client


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_concurrency_limits_from_the_controls_page(binding: str) -> None:
    client = _Client(binding)
    _, text, token = client.page("admin")
    assert 'data-testid="no-concurrency"' in text
    assert 'data-testid="concurrency-form"' in text
    done = client.post(
        "concurrency", "admin", kind="report.build", scope="node", limit="2", csrf_token=token
    )
    assert done.status_code == 303
    assert done.headers["Location"] == f"{MOUNT}/controls?done=concurrency-set"
    keyed = client.post("concurrency", "admin", key="db:main", limit="1", csrf_token=token)
    assert keyed.status_code == 303
    assert {
        (c.kind, c.key, c.scope, c.limit, c.actor) for c in client.engine.concurrency_limits()
    } == {
        ("report.build", None, "node", 2, "admin"),
        (None, "db:main", "cluster", 1, "admin"),
    }
    text = client.page("admin")[1]
    assert 'data-concurrency="report.build/*/node"' in text
    assert 'data-concurrency="*/db:main/cluster"' in text
    assert (
        "Concurrency limit set."
        in client._client.get(
            f"{MOUNT}/controls?done=concurrency-set", headers={"x-user": "admin"}
        ).text
    )
    bad = client.post("concurrency", "admin", kind="report.build", limit="many", csrf_token=token)
    assert bad.status_code == 400
    zero = client.post("concurrency", "admin", kind="report.build", limit="0", csrf_token=token)
    assert zero.status_code == 422  # the engine refuses it (a ValidationError)
    typo = client.post("concurrency", "admin", kind="report.biuld", limit="1", csrf_token=token)
    assert typo.status_code == 422
    ticked = client.post(
        "concurrency",
        "admin",
        kind="billing",
        limit="1",
        allow_unknown_kind="1",
        csrf_token=token,
    )
    assert ticked.status_code == 303
    cleared = client.post(
        "concurrency/clear", "admin", kind="report.build", scope="node", csrf_token=token
    )
    assert cleared.status_code == 303
    assert cleared.headers["Location"] == f"{MOUNT}/controls?done=concurrency-cleared"
    client.post("concurrency/clear", "admin", key="db:main", scope="cluster", csrf_token=token)
    assert [(c.kind, c.scope) for c in client.engine.concurrency_limits()] == [
        ("billing", "cluster")
    ]


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_a_reader_cannot_set_a_concurrency_limit(binding: str) -> None:
    client = _Client(binding)
    _, text, token = client.page("viewer")
    assert "/controls/concurrency" not in text
    refused = client.post("concurrency", "viewer", kind="report.build", limit="1", csrf_token=token)
    assert refused.status_code == 403
    assert client.engine.concurrency_limits() == []


def _worker(client: _Client) -> int:
    """A worker registered with its slots and version, running the page's one job."""
    store = client.engine.store
    store.register_worker(WorkerInfo(id="host-1/7/w", host="host-1", pid=7, slots=4, version="1.2"))
    [job] = store.claim(ClaimRequest(worker_id="host-1/7/w", limit=1))
    return job.id


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_the_workers_page_shows_what_each_runs_and_drains_or_stops_it(binding: str) -> None:
    # Issue 45 item 5.
    client = _Client(binding)
    job_id = _worker(client)
    response = client._client.get(f"{MOUNT}/workers", headers={"x-user": "admin"})
    assert response.status_code == 200
    text = response.text
    assert 'data-worker="host-1/7/w"' in text
    assert f'data-job="{job_id}"' in text  # what it runs now, linked
    assert "1 of 4" in text  # running of its slots
    assert "1.2" in text
    token = re.search(r'name="csrf_token" value="([^"]+)"', text)
    assert token is not None
    headers = {"x-user": "admin", "sec-fetch-site": "same-origin"}
    form = {"worker_id": "host-1/7/w", "csrf_token": token.group(1)}
    drained = client._client.post(f"{MOUNT}/workers/drain", data=form, headers=headers)
    assert drained.status_code == 303
    assert drained.headers["Location"] == f"{MOUNT}/workers?done=worker-drain"
    [request] = client.engine.store.controls().requests
    assert (request.worker_id, request.action, request.actor) == ("host-1/7/w", "drain", "admin")
    page = client._client.get(f"{MOUNT}/workers?done=worker-drain", headers={"x-user": "admin"})
    assert "Asked the worker to drain" in page.text
    assert "drain by admin" in page.text
    stopped = client._client.post(f"{MOUNT}/workers/stop", data=form, headers=headers)
    assert stopped.status_code == 303
    assert [r.action for r in client.engine.store.controls().requests] == ["stop"]
    gone = dict(form, worker_id="nobody")
    assert (
        client._client.post(f"{MOUNT}/workers/stop", data=gone, headers=headers).status_code == 404
    )


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_a_reader_sees_workers_without_buttons(binding: str) -> None:
    client = _Client(binding)
    _worker(client)
    text = client._client.get(f"{MOUNT}/workers", headers={"x-user": "viewer"}).text
    assert 'data-worker="host-1/7/w"' in text
    assert "/workers/drain" not in text
    token = re.search(r'name="csrf_token" value="([^"]+)"', text)
    form = {"worker_id": "host-1/7/w", "csrf_token": token.group(1) if token else ""}
    headers = {"x-user": "viewer", "sec-fetch-site": "same-origin"}
    assert (
        client._client.post(f"{MOUNT}/workers/drain", data=form, headers=headers).status_code == 403
    )
    assert client.engine.store.controls().requests == ()
