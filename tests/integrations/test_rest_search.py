"""The REST job list's search (docs/search.md, "The search filters") through each
binding on PostgreSQL: payload terms, error text, idempotency key, their 422s, the
OpenAPI parameters, and a non-selective search that answers a bounded partial page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import JobPage
from skiplock.integrations.rest import PROBLEM_TYPE, models
from tests.cli.admin_helpers import bury

from .rest_support import FLAVOURS, Client, client_for

if TYPE_CHECKING:
    from collections.abc import Iterator

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


def ids(reply: Any) -> list[int]:
    assert reply.status == 200, reply.body
    models.JobPage.model_validate(reply.body)
    return [job["id"] for job in reply.body["jobs"]]


def test_search_by_payload_error_and_key(client: Client, jobs: Engine, pg_dsn: str) -> None:
    a = jobs.enqueue("user.sync", {"user_id": 42, "org": {"id": 7}}).id
    b = jobs.enqueue("user.sync", {"user_id": "42"}, idempotency_key="sync-42").id
    c = jobs.enqueue("user.sync", {"user_id": 43}).id
    bury(pg_dsn, c, error="Timeout talking to S3")

    def search(**params: Any) -> list[int]:
        return ids(client.get("/jobs", params=params))

    assert search(payload="user_id=42") == [a]
    assert search(payload='user_id="42"') == [b]
    assert search(payload="org.id=7") == [a]
    assert search(payload='{"org": {"id": 7}}') == [a]
    assert search(payload=["user_id=42", "org.id=8"]) == []  # every term
    assert search(error="timeout TALKING") == [c]
    assert search(error="timeout", state="pending") == []
    assert search(idempotency_key="sync-42") == [b]
    assert search(idempotency_key="sync-4") == []


def test_search_rejects_bad_terms(client: Client) -> None:
    for params, where in [
        ({"payload": "no-equals-sign"}, None),
        ({"payload": "{not json"}, None),
        ({"payload": "[1, 2]"}, None),
        ({"payload": "=1"}, None),
        ({"error": ""}, "error"),
        ({"error": "x" * 201}, "error"),
        ({"idempotency_key": ""}, "idempotency_key"),
    ]:
        reply = client.get("/jobs", params=params)
        assert reply.status == 422, (params, reply.body)
        assert reply.content_type.startswith(PROBLEM_TYPE)
        if where is not None:
            assert [e["loc"][:2] for e in reply.body["errors"]] == [["query", where]], params


def test_the_openapi_document_lists_the_search_parameters(client: Client) -> None:
    document = client.get("/openapi.json").body
    parameters = {p["name"] for p in document["paths"]["/jobs"]["get"]["parameters"]}
    assert {"payload", "error", "idempotency_key"} <= parameters


def test_a_non_selective_search_answers_a_bounded_partial_page(
    client: Client, jobs: Engine
) -> None:
    # No payload index: a payload search walks the table by id, at most READ_FACTOR rows
    # per job asked for; the rare match lies past the first page's budget.
    for n in range(2 * JobPage.READ_FACTOR + 5):
        jobs.enqueue("search.common", {"n": n})
    rare = jobs.enqueue("search.rare", {"n": -1}).id
    first = client.get("/jobs", params={"payload": "n=-1", "limit": 1})
    assert ids(first) == []
    assert first.body["partial"] is True
    rest = client.get(
        "/jobs", params={"payload": "n=-1", "limit": 1, "cursor": first.body["next_cursor"]}
    )
    assert ids(rest) == [rare]
    assert rest.body["partial"] is False
