"""The dashboard's concurrency limits (issue 45 item 4) under FastAPI and Flask on the
in-memory store: set and clear a kind's (node, cluster) and a key's limit from the
controls page with the caller as the actor; a bad limit is a 400, an unknown kind a 422
unless ticked, a reader gets no form and a 403."""

from __future__ import annotations

import pytest

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
