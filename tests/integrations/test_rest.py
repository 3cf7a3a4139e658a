"""The REST admin API through each binding (FastAPI over an AsyncEngine and over a sync
Engine, Flask) on PostgreSQL: every operation, deny by default (401, 403, nothing
changed), the caller's identity as the audit actor, problem details, the OpenAPI
document."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, Engine, JobState, Settings, declare
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import ClaimRequest, JobPage, job_json
from skiplock.integrations.fastapi import create_router, mount
from skiplock.integrations.flask import create_blueprint
from skiplock.integrations.rest import (
    OPERATIONS,
    PROBLEM_TYPE,
    AsyncRestApi,
    Permission,
    Request,
    RestApi,
    models,
)
from skiplock.integrations.rest._support import RETRY_AFTER
from tests.cli.admin_helpers import add_worker, bury, strand

from .rest_support import FLAVOURS, PREFIX, VIEWER, Client, client_for, snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres


@pytest.fixture
def jobs(pg_dsn: str) -> Iterator[Engine]:
    """A sync engine on the test database, to arrange jobs beside the app's own."""
    store = PsycopgJobStore(pg_dsn, max_size=2)
    yield Engine(store)
    store.close()


@pytest.fixture(params=FLAVOURS)
def client(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[Client]:
    with client_for(request.param, pg_dsn) as made:
        yield made


def running(jobs: Engine, kind: str = "slow.job") -> int:
    """A job claimed by worker ``w1`` (running)."""
    job_id = jobs.enqueue(kind, {}).id
    claimed = jobs.store.claim(ClaimRequest(worker_id="w1", limit=1, kinds=frozenset({kind})))
    assert [job.id for job in claimed] == [job_id]
    return job_id


def dead(jobs: Engine, dsn: str, kind: str = "webhook.send", **options: Any) -> int:
    job_id = jobs.enqueue(kind, {"url": "https://a.example"}, **options).id
    bury(dsn, job_id, error="refused")
    return job_id


def problem(reply: Any, status: int, slug: str) -> dict[str, Any]:
    """The problem details of ``reply``, checked: status, media type, type, schema."""
    assert reply.status == status, (reply.status, reply.body)
    assert reply.content_type.startswith(PROBLEM_TYPE), reply.content_type
    body: dict[str, Any] = reply.body
    assert body["type"] == f"urn:skiplock:problem:{slug}"
    assert body["status"] == status
    models.Problem.model_validate(body)
    return body


def ids(reply: Any) -> list[int]:
    assert reply.status == 200, reply.body
    models.JobPage.model_validate(reply.body)
    return [job["id"] for job in reply.body["jobs"]]


# ---- each operation -----------------------------------------------------------------------


def test_list_jobs_filters(client: Client, jobs: Engine, pg_dsn: str) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    a = jobs.enqueue("report.build", {"n": 1}, tenant="acme", priority=1).id
    b = jobs.enqueue("report.build", {"n": 2}, tenant="globex", priority=5).id
    c = jobs.enqueue("email.send", {"n": 3}, tenant="acme", priority=-2, available_at=soon).id
    d = dead(jobs, pg_dsn)

    assert ids(client.get("/jobs")) == [a, b, c, d]
    assert ids(client.get("/jobs", params={"state": "dead"})) == [d]
    assert ids(client.get("/jobs", params={"state": ["dead", "pending"]})) == [a, b, c, d]
    assert ids(client.get("/jobs", params={"kind": "report.build"})) == [a, b]
    assert ids(client.get("/jobs", params={"tenant": ["acme"]})) == [a, c]
    assert ids(client.get("/jobs", params={"priority_min": 1, "priority_max": 4})) == [a]
    assert ids(client.get("/jobs", params={"priority_max": 0, "kind": "email.send"})) == [c]
    created = jobs.get_job(b).created_at
    assert ids(client.get("/jobs", params={"created_since": created.isoformat()})) == [b, c, d]
    assert ids(client.get("/jobs", params={"created_before": created.isoformat()})) == [a]
    later = (soon - timedelta(minutes=1)).isoformat()
    assert ids(client.get("/jobs", params={"available_since": later})) == [c]
    assert ids(client.get("/jobs", params={"available_before": later})) == [a, b, d]
    # Z and offsets are both RFC 3339.
    zulu = (soon + timedelta(minutes=1)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ids(client.get("/jobs", params={"available_before": zulu})) == [a, b, c, d]


def test_list_jobs_cursor_pages_and_order(client: Client, jobs: Engine) -> None:
    made = [jobs.enqueue("page.me", {"n": n}).id for n in range(5)]
    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        reply = client.get("/jobs", params=params)
        seen += ids(reply)
        pages += 1
        cursor = reply.body["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == (made, 3)
    newest = client.get("/jobs", params={"limit": 2, "order": "desc"})
    assert ids(newest) == made[:-3:-1]
    older = client.get(
        "/jobs", params={"limit": 2, "order": "desc", "cursor": newest.body["next_cursor"]}
    )
    assert ids(older) == [made[2], made[1]]


def test_a_sparse_filter_answers_partial_pages_that_continue_the_search(
    client: Client, jobs: Engine
) -> None:
    # A page of limit 1 reads at most JobPage.READ_FACTOR rows per job asked for (two: the
    # one shown and the one that says there is more); the rare job lies beyond that.
    for n in range(2 * JobPage.READ_FACTOR + 5):
        jobs.enqueue("page.common", {"n": n})
    rare = jobs.enqueue("page.rare", {}).id
    first = client.get("/jobs", params={"kind": "page.rare", "limit": 1})
    assert ids(first) == []
    assert first.body["partial"] is True
    assert first.body["next_cursor"] is not None
    rest = client.get(
        "/jobs", params={"kind": "page.rare", "limit": 1, "cursor": first.body["next_cursor"]}
    )
    assert ids(rest) == [rare]
    assert (rest.body["partial"], rest.body["next_cursor"]) == (False, None)
    whole = client.get("/jobs", params={"limit": 1})
    assert whole.body["partial"] is False


def test_list_jobs_rejects_bad_parameters(client: Client) -> None:
    for params, where in [
        ({"state": "exploded"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"priority_min": 40000}, "priority_min"),
        ({"created_since": "yesterday"}, "created_since"),
        ({"created_since": "2024-01-01T00:00:00"}, "created_since"),  # no offset
        ({"cursor": "-1"}, "cursor"),
        ({"order": "random"}, "order"),
        ({"statte": "dead"}, "statte"),  # misspelt: an error, not a silent no-op
        ({"limit": ["1", "2"]}, "limit"),
    ]:
        body = problem(client.get("/jobs", params=params), 422, "invalid-request")
        assert [e["loc"][:2] for e in body["errors"]] == [["query", where]], (params, body)
    # Out of bigint: a 422 that names the cursor, never an internal parameter.
    body = problem(client.get("/jobs", params={"cursor": "9" * 19}), 422, "invalid-request")
    assert [e["loc"][:2] for e in body["errors"]] == [["query", "cursor"]], body
    assert "after_id" not in str(body)
    assert "beyond the largest job id" in str(body["errors"])
    # A number is no date-time (pydantic would read 0.5 as seconds after 1970).
    for since in ("0.5", "1733300000"):
        body = problem(client.get("/jobs", params={"created_since": since}), 422, "invalid-request")
        assert [e["loc"][:2] for e in body["errors"]] == [["query", "created_since"]], body


#: Texts Python's int() reads as the job id ``n`` (issue 32: ``/jobs/2_0`` was job 20).
LOOSE_IDS = [
    lambda n: f"{str(n)[0]}_{str(n)[1:]}",
    lambda n: f"+{n}",
    lambda n: f" {n}",
    lambda n: f"{n}.0",
    lambda n: "".join(chr(0x0660 + int(d)) for d in str(n)),  # Arabic-Indic digits
]


@pytest.mark.parametrize("loose", LOOSE_IDS)
def test_a_job_id_in_the_path_is_digits_only(client: Client, jobs: Engine, loose: Any) -> None:
    job_id = next(
        i
        for i in iter(lambda: jobs.enqueue("email.send", {"to": "a@example.com"}).id, 0)
        if i >= 10
    )
    body = problem(client.get(f"/jobs/{loose(job_id)}"), 422, "invalid-request")
    assert body["errors"][0]["loc"] == ["path", "job_id"]
    assert client.get(f"/jobs/{job_id}").status == 200


def test_unknown_paths_and_methods_under_the_mount_are_problems_after_the_hook(
    client: Client,
) -> None:
    problem(client.get("/nothing/here", token=None), 401, "unauthenticated")
    body = problem(client.get("/nothing/here"), 404, "not-found")
    assert body["instance"] == PREFIX + "/nothing/here"
    reply = client.call("PUT", "/jobs/1")
    problem(reply, 405, "method-not-allowed")
    assert reply.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"
    assert reply.headers["cache-control"] == "no-store"
    problem(client.call("PATCH", "/counts"), 405, "method-not-allowed")


def test_options_asks_the_hook_then_names_the_methods(client: Client) -> None:
    problem(client.call("OPTIONS", "/jobs", token=None), 401, "unauthenticated")
    reply = client.call("OPTIONS", "/jobs")
    assert reply.status == 204
    assert reply.headers["allow"] == "GET, HEAD, POST, OPTIONS"


def test_every_answer_with_a_payload_is_not_to_be_stored(client: Client, jobs: Engine) -> None:
    job_id = jobs.enqueue("email.send", {"to": "a@example.com"}).id
    for reply in (
        client.get("/jobs"),
        client.get(f"/jobs/{job_id}"),
        client.get("/counts"),
        client.get("/openapi.json"),
        client.get("/jobs/999999"),
        client.get("/jobs", token=None),
        client.post(f"/jobs/{job_id}/cancel"),
    ):
        assert reply.headers["cache-control"] == "no-store", reply


def test_create_job(client: Client, jobs: Engine) -> None:
    reply = client.post(
        "/jobs",
        json={
            "kind": "email.send",
            "payload": {"to": "a@example.com"},
            "tenant": "acme",
            "priority": 3,
            "max_attempts": 2,
        },
    )
    assert reply.status == 201, reply.body
    models.Job.model_validate(reply.body)
    job = jobs.get_job(reply.body["id"])
    assert reply.headers["location"] == f"{PREFIX}/jobs/{job.id}"
    assert (job.kind, job.payload, job.tenant, job.priority, job.max_attempts) == (
        "email.send",
        {"to": "a@example.com"},
        "acme",
        3,
        2,
    )
    assert reply.body == job_json(job)

    keyed = {"kind": "email.send", "payload": [1], "idempotency_key": "order-7"}
    first = client.post("/jobs", json=keyed)
    again = client.post("/jobs", json=keyed | {"payload": [2]})
    assert (first.status, again.status) == (201, 200)
    assert again.body["id"] == first.body["id"]
    assert again.body["payload"] == [1]

    # The key's scope and conflict policy: a tenant's own key, then its pending job replaced.
    scoped = keyed | {"tenant": "acme", "idempotency_scope": "tenant"}
    own = client.post("/jobs", json=scoped)
    replaced = client.post(
        "/jobs", json=scoped | {"payload": [3], "idempotency_conflict": "replace_pending"}
    )
    assert (own.status, replaced.status) == (201, 200)
    assert own.body["id"] == replaced.body["id"] != first.body["id"]
    assert replaced.body["payload"] == jobs.get_job(own.body["id"]).payload == [3]
    problem(
        client.post("/jobs", json=keyed | {"idempotency_scope": "site"}), 422, "invalid-request"
    )

    later = client.post("/jobs", json={"kind": "report.build", "delay": 3600})
    assert later.status == 201
    assert jobs.get_job(later.body["id"]).available_at > datetime.now(UTC) + timedelta(minutes=59)


def test_create_job_refuses_bad_input_and_writes_nothing(
    client: Client, jobs: Engine, pg_dsn: str
) -> None:
    before = snapshot(pg_dsn)
    body = problem(client.post("/jobs", json={"kind": "bad kind!"}), 422, "invalid-request")
    assert body["errors"][0]["loc"] == ["body", "kind"]
    problem(client.post("/jobs", json={"kind": "k", "colour": "red"}), 422, "invalid-request")
    problem(client.post("/jobs", json={"kind": "k", "priority": "5"}), 422, "invalid-request")
    problem(client.post("/jobs", json=[]), 422, "invalid-request")
    problem(client.post("/jobs"), 422, "invalid-request")  # no body
    # Mutually exclusive: the engine's own validation, as a 422.
    both = {"kind": "k", "delay": 5, "available_at": "2030-01-01T00:00:00Z"}
    assert (
        "mutually exclusive"
        in problem(client.post("/jobs", json=both), 422, "invalid-request")["detail"]
    )
    nul = {"kind": "k", "payload": {"text": "a\u0000b"}}
    problem(client.post("/jobs", json=nul), 422, "invalid-request")
    malformed = client.post("/jobs", content=b"{", headers={"Content-Type": "application/json"})
    problem(malformed, 400, "malformed-request")
    as_text = client.post("/jobs", content=b'{"kind": "k"}', headers={"Content-Type": "text/plain"})
    problem(as_text, 415, "unsupported-media-type")
    assert snapshot(pg_dsn) == before


def test_get_job(client: Client, jobs: Engine, pg_dsn: str) -> None:
    job_id = dead(jobs, pg_dsn, tenant="acme")
    reply = client.get(f"/jobs/{job_id}")
    assert reply.status == 200
    models.JobDetail.model_validate(reply.body)
    job = jobs.get_job(job_id)
    assert reply.body == job_json(job) | {"audit_trail": []}  # the engine records none
    assert (reply.body["state"], reply.body["last_error"], reply.body["payload"]) == (
        "dead",
        "refused",
        {"url": "https://a.example"},
    )
    assert "999999" in problem(client.get("/jobs/999999"), 404, "not-found")["detail"]
    for bad in ("abc", "0", "-3", str(2**63)):
        body = problem(client.get(f"/jobs/{bad}"), 422, "invalid-request")
        assert body["errors"][0]["loc"][:2] == ["path", "job_id"]


def test_why_a_job_waits(client: Client, jobs: Engine, pg_dsn: str) -> None:
    job_id = jobs.enqueue("report.build", {}, delay=3600).id
    add_worker(pg_dsn, "w-why", "webhook.send")
    reply = client.get(f"/jobs/{job_id}/why")
    assert reply.status == 200
    models.JobWait.model_validate(reply.body)
    assert (reply.body["job_id"], reply.body["state"]) == (job_id, "pending")
    due_later, no_worker = reply.body["reasons"]
    assert (due_later["code"], no_worker["code"]) == ("due_later", "no_worker")
    assert due_later["when"] == jobs.get_job(job_id).available_at.isoformat()
    assert no_worker["details"] == {"live_workers": 1}
    finished = dead(jobs, pg_dsn)
    [reason] = client.get(f"/jobs/{finished}/why").body["reasons"]
    assert reason["code"] == "not_pending"
    assert "999999" in problem(client.get("/jobs/999999/why"), 404, "not-found")["detail"]


def test_retry_one_job(client: Client, jobs: Engine, pg_dsn: str) -> None:
    job_id = dead(jobs, pg_dsn)
    reply = client.post(f"/jobs/{job_id}/retry")
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["attempts"]) == ("pending", 0)
    assert jobs.get_job(job_id).state is JobState.PENDING
    # Pending cannot be replayed: 409, nothing changed.
    before = snapshot(pg_dsn)
    assert (
        "pending"
        in problem(client.post(f"/jobs/{job_id}/retry"), 409, "invalid-transition")["detail"]
    )
    assert snapshot(pg_dsn) == before
    bury(pg_dsn, job_id)
    kept = client.post(f"/jobs/{job_id}/retry", json={"reset_attempts": False})
    assert (kept.body["state"], kept.body["attempts"]) == (
        "pending",
        jobs.get_job(job_id).max_attempts,
    )
    problem(client.post("/jobs/424242/retry"), 404, "not-found")
    problem(client.post(f"/jobs/{job_id}/retry", json={"reset": True}), 422, "invalid-request")


def test_cancel_fail_and_delete(client: Client, jobs: Engine, pg_dsn: str) -> None:
    a = jobs.enqueue("report.build", {"n": 1}).id
    b = jobs.enqueue("report.build", {"n": 2}).id
    assert client.post(f"/jobs/{a}/cancel").body["state"] == "cancelled"
    problem(client.post(f"/jobs/{a}/cancel"), 409, "invalid-transition")
    assert client.post(f"/jobs/{a}/fail").body["state"] == "failed"
    problem(client.post(f"/jobs/{a}/fail"), 409, "invalid-transition")
    deleted = client.delete(f"/jobs/{b}")
    assert deleted.status == 200
    assert deleted.body["id"] == b
    assert deleted.body["payload"] == {"n": 2}
    problem(client.get(f"/jobs/{b}"), 404, "not-found")
    problem(client.delete(f"/jobs/{b}"), 404, "not-found")
    busy = running(jobs)
    assert "running" in problem(client.delete(f"/jobs/{busy}"), 409, "invalid-transition")["detail"]
    assert client.post(f"/jobs/{busy}/cancel").body["state"] == "cancelled"
    # An operation without a body refuses one (and any form).
    problem(client.post(f"/jobs/{a}/cancel", json={"why": "x"}), 415, "unsupported-media-type")


def test_an_empty_body_is_taken_whatever_its_declared_type(client: Client, jobs: Engine) -> None:
    # Some servers declare a type on every request (Django's runserver: text/plain).
    a, b = (jobs.enqueue("report.build", {"n": n}).id for n in range(2))
    for media_type in ("text/plain", "application/x-www-form-urlencoded"):
        headers = {"Content-Type": media_type}
        problem(
            client.post(f"/jobs/{a}/cancel", content=b"x=1", headers=headers),
            415,
            "unsupported-media-type",
        )
    cancelled = client.post(
        f"/jobs/{a}/cancel", content=b"", headers={"Content-Type": "text/plain"}
    )
    assert cancelled.body["state"] == "cancelled"
    deleted = client.delete(f"/jobs/{b}", content=b"", headers={"Content-Type": "text/plain"})
    assert deleted.body["id"] == b


def test_dead_letter_view_and_bulk_retry(client: Client, jobs: Engine, pg_dsn: str) -> None:
    hooks = [dead(jobs, pg_dsn, tenant=t) for t in ("acme", "acme", "globex")]
    mail = dead(jobs, pg_dsn, kind="email.send")
    jobs.enqueue("webhook.send", {})  # pending: not in the DLQ
    assert ids(client.get("/dlq")) == [*hooks, mail]
    assert ids(client.get("/dlq", params={"kind": "webhook.send", "tenant": "acme"})) == hooks[:2]
    first = client.get("/dlq", params={"limit": 3})
    assert len(ids(first)) == 3
    assert ids(client.get("/dlq", params={"cursor": first.body["next_cursor"]})) == [mail]
    problem(client.get("/dlq", params={"state": "dead"}), 422, "invalid-request")

    reply = client.post("/dlq/retry", json={"kind": ["webhook.send"], "tenant": ["acme"]})
    assert reply.status == 200
    assert reply.body == {"retried": hooks[:2], "skipped": []}
    assert ids(client.get("/dlq")) == [hooks[2], mail]
    problem(client.post("/dlq/retry"), 422, "invalid-request")  # the filter is explicit
    everything = client.post("/dlq/retry", json={"reset_attempts": False})
    assert everything.body == {"retried": [hooks[2], mail], "skipped": []}
    assert jobs.get_job(mail).attempts == jobs.get_job(mail).max_attempts
    assert ids(client.get("/dlq")) == []


def test_a_bulk_retry_bound_to_what_was_confirmed(
    client: Client, jobs: Engine, pg_dsn: str
) -> None:
    # Issue 41, item 1: the caller was shown 2 dead webhooks (up to the second); another
    # died before the replay: the replay takes only what was confirmed.
    first, second = dead(jobs, pg_dsn), dead(jobs, pg_dsn)
    bound = {"kind": ["webhook.send"], "through": second, "expected": 2}
    third = dead(jobs, pg_dsn)  # dies after the confirmation: not part of it
    reply = client.post("/dlq/retry", json=bound)
    models.RetriedJobs.model_validate(reply.body)
    assert reply.body == {"retried": [first, second], "skipped": []}
    assert ids(client.get("/dlq")) == [third]
    # Confirmed: 1 dead job up to third; the first died again meanwhile: 409, the count.
    bury(pg_dsn, first, error="refused again")
    refused = problem(
        client.post("/dlq/retry", json={"through": third, "expected": 1}), 409, "selection-changed"
    )
    assert (refused["count"], refused["confirmed"]) == (2, 1)
    assert ids(client.get("/dlq")) == [first, third]  # nothing replayed
    for bad in ({"through": 0}, {"expected": -1}, {"expected": 10_001}, {"through": "3"}):
        problem(client.post("/dlq/retry", json=bad), 422, "invalid-request")


def test_a_bulk_action_on_confirmed_jobs(client: Client, jobs: Engine, pg_dsn: str) -> None:
    a, b, c = (dead(jobs, pg_dsn) for _ in range(3))
    shown = [{"id": a, "state": "dead"}, {"id": b, "state": "dead"}]
    jobs.retry_job(b)  # another operator, since the caller was shown b dead
    refused = problem(
        client.post("/bulk", json={"action": "discard", "jobs": shown}), 409, "selection-changed"
    )
    assert (refused["count"], refused["confirmed"]) == (1, 2)
    assert ids(client.get("/dlq")) == [a, c]  # nothing discarded
    reply = client.post("/bulk", json={"action": "discard", "jobs": [shown[0]]})
    models.BulkResult.model_validate(reply.body)
    assert reply.body == {"changed": [a], "skipped": []}
    reply = client.post("/bulk", json={"action": "cancel", "jobs": [{"id": b, "state": "pending"}]})
    assert reply.body == {"changed": [b], "skipped": []}
    for bad in (
        {"action": "purge", "jobs": shown},
        {"action": "retry", "jobs": []},
        {"action": "retry", "jobs": [{"id": c, "state": "pending"}]},  # retry: not pending
        {"action": "retry", "jobs": [{"id": c}]},
    ):
        problem(client.post("/bulk", json=bad), 422, "invalid-request")
    assert ids(client.get("/dlq")) == [c]


def test_purge_dead_jobs_counts_first_then_deletes_what_was_counted(
    client: Client, jobs: Engine, pg_dsn: str
) -> None:
    hooks = [dead(jobs, pg_dsn, tenant="acme") for _ in range(2)]
    mail = dead(jobs, pg_dsn, kind="mail.send")
    count = client.post("/dlq/purge", json={"kind": ["webhook.send"], "dry_run": True})
    assert count.status == 200, count.body
    assert count.body == {"matched": 2, "deleted": 0, "up_to_id": hooks[1]}
    later = dead(jobs, pg_dsn, tenant="acme")  # dies after the count
    body = {"kind": ["webhook.send"], "error": "REFUSED", "up_to_id": hooks[1]}
    reply = client.post("/dlq/purge", json=body)
    assert reply.body == {"matched": 2, "deleted": 2, "up_to_id": hooks[1]}
    assert ids(client.get("/dlq")) == [mail, later]
    problem(client.post("/dlq/purge"), 422, "invalid-request")  # the filter is explicit
    for bad in (
        {"error": " "},
        {"error": "x" * 201},
        {"up_to_id": "5"},
        {"died_before": "2030-01-01T00:00:00"},  # no offset
        {"older_than": 60},  # a misspelt filter is an error, not a no-op
    ):
        problem(client.post("/dlq/purge", json=bad), 422, "invalid-request")
    assert ids(client.get("/dlq")) == [mail, later]
    assert client.post("/dlq/purge", json={}).body == {
        "matched": 2,
        "deleted": 2,
        "up_to_id": later,
    }
    assert ids(client.get("/dlq")) == []


def test_counts_workers_and_health(client: Client, jobs: Engine, pg_dsn: str) -> None:
    jobs.enqueue("report.build", {}, tenant="acme")
    jobs.enqueue("report.build", {}, tenant="acme")
    dead(jobs, pg_dsn)
    counts = client.get("/counts")
    models.Counts.model_validate(counts.body)
    assert counts.body == {
        "counts": [
            {"state": "pending", "kind": "report.build", "tenant": "acme", "count": 2},
            {"state": "dead", "kind": "webhook.send", "tenant": None, "count": 1},
        ]
    }
    problem(client.get("/counts", params={"x": "1"}), 422, "invalid-request")

    add_worker(pg_dsn, "w-live", "report.build")
    add_worker(pg_dsn, "w-old", silent_for=3600)
    workers = client.get("/workers")
    models.Workers.model_validate(workers.body)
    assert sorted((w["id"], w["live"], w["kinds"]) for w in workers.body["workers"]) == [
        ("w-live", True, ["report.build"]),
        ("w-old", False, None),
    ]
    forgiving = client.get("/workers", params={"worker_timeout": 7200})
    assert all(w["live"] for w in forgiving.body["workers"])
    problem(client.get("/workers", params={"worker_timeout": 0}), 422, "invalid-request")
    problem(client.get("/workers", params={"worker_timeout": "nan"}), 422, "invalid-request")

    health = client.get("/health")
    models.HealthReport.model_validate(health.body)
    assert health.status == 200
    assert health.body["healthy"] is True
    assert {k["kind"]: k["pending_due"] for k in health.body["kinds"]} == {
        "report.build": 2,
        "webhook.send": 0,
    }
    strict = client.get("/health", params={"max_dead": 0})
    assert strict.status == 200
    assert strict.body["healthy"] is False
    assert "webhook.send" in strict.body["problems"][0]
    problem(client.get("/health", params={"max_dead": -1}), 422, "invalid-request")


def test_health_reports_running_jobs_whose_worker_is_gone(
    client: Client, jobs: Engine, pg_dsn: str
) -> None:
    # Issue 41: a job left running under a worker that unregistered.
    job_id = jobs.enqueue("report.build", {}).id
    strand(pg_dsn, job_id, "w-left", 90)
    health = client.get("/health")
    models.HealthReport.model_validate(health.body)
    assert health.body["healthy"] is False
    [line] = health.body["problems"]
    assert line.startswith("1 running job(s) whose worker is gone: w-left (unregistered")
    [group] = health.body["abandoned"]
    assert (group["worker_id"], group["registered"], group["running"]) == ("w-left", False, 1)
    assert group["age_seconds"] >= 90


def test_pauses_and_limits(client: Client, jobs: Engine) -> None:
    assert client.get("/pauses").body == {"pauses": []}
    paused = client.post("/pauses", json={"kind": "mail.send", "reason": "outage"})
    assert paused.status == 200, paused.body
    models.Pause.model_validate(paused.body)
    assert (paused.body["kind"], paused.body["tenant"], paused.body["actor"]) == (
        "mail.send",
        None,
        "ops@example.com",
    )
    listed = client.get("/pauses").body
    models.Pauses.model_validate(listed)
    assert [p["reason"] for p in listed["pauses"]] == ["outage"]
    assert [p.kind for p in jobs.paused()] == ["mail.send"]
    health = client.get("/health").body
    assert [p["kind"] for p in health["paused"]] == ["mail.send"]
    problem(client.post("/pauses", json={}), 422, "invalid-request")
    problem(client.post("/pauses", json={"kind": "k", "x": 1}), 422, "invalid-request")
    resumed = client.post("/pauses/resume", json={"kind": "mail.send"})
    assert resumed.status == 200
    assert resumed.body["reason"] == "outage"
    problem(client.post("/pauses/resume", json={"kind": "mail.send"}), 404, "not-found")

    assert client.get("/limits").body == {"limits": []}
    limit = client.post(
        "/limits", json={"kind": "mail.send", "tenant": "acme", "rps": 2.5, "burst": 5}
    )
    assert limit.status == 200, limit.body
    models.RateLimit.model_validate(limit.body)
    assert (limit.body["rps"], limit.body["burst"], limit.body["actor"]) == (
        2.5,
        5,
        "ops@example.com",
    )
    cap = client.post("/limits", json={"provider": "smtp", "rps": 20, "burst": 40})
    assert cap.status == 200
    listed = client.get("/limits").body
    models.Limits.model_validate(listed)
    assert len(listed["limits"]) == 2
    problem(
        client.post("/limits", json={"kind": "k", "rps": 0, "burst": 1}), 422, "invalid-request"
    )
    problem(
        client.post("/limits", json={"kind": "k", "provider": "p", "rps": 1, "burst": 1}),
        422,
        "invalid-request",
    )
    cleared = client.post("/limits/clear", json={"provider": "smtp"})
    assert cleared.body["provider"] == "smtp"
    problem(client.post("/limits/clear", json={"provider": "smtp"}), 404, "not-found")
    assert [x.tenant for x in jobs.limits()] == ["acme"]


def test_pauses_and_limits_of_unknown_kinds_are_refused(client: Client) -> None:
    # Issue 41 item 4: a typo answered 200 and the limit never applied.
    client.engine.declare(declare("email_send"))
    for path, body in (
        ("/pauses", {"kind": "emial_send"}),
        ("/pauses", {"kind": "emial_send", "tenant": "acme", "allow_unknown_kind": False}),
        ("/limits", {"kind": "emial_send", "rps": 1, "burst": 1}),
        ("/limits", {"kind": "emial_send", "tenant": "acme", "rps": 1, "burst": 1}),
    ):
        detail = problem(client.post(path, json=body), 422, "invalid-request")["detail"]
        assert "unknown kind 'emial_send'" in detail
        assert "(known kinds: 'email_send')" in detail
        assert detail.endswith("Did you mean 'email_send'?")
    assert client.get("/pauses").body == {"pauses": []}
    assert client.get("/limits").body == {"limits": []}
    # The opt-in: a kind another service declares.
    opted = client.post("/pauses", json={"kind": "billing", "allow_unknown_kind": True})
    assert opted.status == 200, opted.body
    limit = {"kind": "billing", "rps": 1, "burst": 1, "allow_unknown_kind": True}
    assert client.post("/limits", json=limit).status == 200
    problem(
        client.post("/pauses", json={"kind": "k", "allow_unknown_kind": 1}), 422, "invalid-request"
    )


def test_openapi_document_is_served_at_the_mount_point(client: Client) -> None:
    reply = client.get("/openapi.json")
    assert reply.status == 200
    document = reply.body
    assert document["openapi"].startswith("3.1")
    assert document["servers"] == [{"url": PREFIX}]
    operation_ids = {
        operation["operationId"]
        for path in document["paths"].values()
        for operation in path.values()
    }
    assert operation_ids == {op.id for op in OPERATIONS}
    problem(client.get("/openapi.json", token=None), 401, "unauthenticated")


# ---- deny by default ----------------------------------------------------------------------


def every_call(job_id: int) -> list[tuple[str, str, str, Any]]:
    """(operation, method, path, body) of every operation, on job ``job_id``."""
    bodies = {
        "createJob": {"kind": "k"},
        "retryDeadJobs": {},
        "actOnJobs": {"action": "discard", "jobs": [{"id": job_id, "state": "dead"}]},
        "purgeDeadJobs": {},
        "pause": {"kind": "k"},
        "resume": {"kind": "k"},
        "setLimit": {"kind": "k", "rps": 1, "burst": 1},
        "clearLimit": {"kind": "k"},
        "setConcurrency": {"kind": "k", "limit": 1},
        "clearConcurrency": {"kind": "k"},
        "drainWorker": {"worker_id": "w"},
        "stopWorker": {"worker_id": "w"},
    }
    calls = []
    for op in OPERATIONS:
        path = op.path.replace("{job_id}", str(job_id))
        calls.append((op.id, op.method, path, bodies.get(op.id)))
    return [*calls, ("openapi", "GET", "/openapi.json", None)]


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_unauthenticated_callers_get_401_and_change_nothing(
    client: Client, jobs: Engine, pg_dsn: str, token: str | None
) -> None:
    job_id = dead(jobs, pg_dsn)
    before = snapshot(pg_dsn)
    for name, method, path, body in every_call(job_id):
        reply = client.call(method, path, token=token, json=body)
        problem(reply, 401, "unauthenticated")
        assert reply.headers["www-authenticate"] == 'Bearer realm="skiplock"', name
    assert snapshot(pg_dsn) == before


def test_read_only_callers_get_403_on_writes_and_change_nothing(
    client: Client, jobs: Engine, pg_dsn: str
) -> None:
    job_id = dead(jobs, pg_dsn)
    before = snapshot(pg_dsn)
    writes = {op.id for op in OPERATIONS if op.permission is Permission.WRITE}
    assert writes == {
        "createJob",
        "retryJob",
        "retryDeadJobs",
        "actOnJobs",
        "purgeDeadJobs",
        "cancelJob",
        "failJob",
        "deleteJob",
        "pause",
        "resume",
        "setLimit",
        "clearLimit",
        "setConcurrency",
        "clearConcurrency",
        "drainWorker",
        "stopWorker",
    }
    for name, method, path, body in every_call(job_id):
        reply = client.call(method, path, token=VIEWER, json=body)
        if name in writes:
            detail = problem(reply, 403, "forbidden")["detail"]
            assert detail == "viewer@example.com may not write"
        else:
            assert reply.status == 200, (name, reply.body)
    assert snapshot(pg_dsn) == before


@pytest.mark.parametrize("identity", [True, "", "ops\nadmin", "x" * 256])
def test_hook_that_returns_no_identity_refuses_the_request(
    jobs: Engine, pg_dsn: str, caplog: pytest.LogCaptureFixture, identity: object
) -> None:
    job_id = jobs.enqueue("report.build", {}).id
    before = snapshot(pg_dsn)

    async def hook_async(request: Request, permission: Permission) -> Any:
        return identity

    for flavour in FLAVOURS:
        hook = (lambda r, p: identity) if flavour != "fastapi-async" else hook_async
        with client_for(flavour, pg_dsn, hook=hook) as made:
            reply = made.post(f"/jobs/{job_id}/cancel")
            problem(reply, 500, "internal-error")
            assert "see the server's log" in reply.body["detail"]
    assert snapshot(pg_dsn) == before
    assert "must return the caller's identity or None" in caplog.text


async def _true_async(request: Request, permission: Permission) -> Any:
    return True


def test_bindings_refuse_to_mount_without_a_hook() -> None:
    async_engine = AsyncEngine(AsyncInMemoryJobStore())
    engine = Engine(InMemoryJobStore())
    for make in (
        lambda: create_router(async_engine, authorize=None),  # type: ignore[arg-type]
        lambda: create_router(engine, authorize=None),  # type: ignore[arg-type]
        lambda: create_blueprint(engine, authorize=None),  # type: ignore[arg-type]
        lambda: RestApi(engine, authorize=None),  # type: ignore[arg-type]
        lambda: AsyncRestApi(async_engine, authorize=None),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="denies by default: pass authorize="):
            make()
    with pytest.raises(TypeError, match="authorize"):
        create_router(async_engine)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="authorize"):
        create_blueprint(engine)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="must be a callable"):
        create_blueprint(engine, authorize="admin")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs an AsyncEngine"):
        create_blueprint(engine, authorize=_true_async)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Flask needs a sync skiplock Engine"):
        create_blueprint(async_engine, authorize=lambda r, p: "x")  # type: ignore[arg-type]


# ---- the caller is the audit actor --------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_callers_identity_is_the_audit_actor(flavour: str, jobs: Engine, pg_dsn: str) -> None:
    job_id = jobs.enqueue("report.build", {"n": 1}).id
    other = jobs.enqueue("report.build", {"n": 2}).id
    with client_for(flavour, pg_dsn, settings=Settings(audit=True)) as made:
        assert made.post(f"/jobs/{job_id}/cancel").status == 200
        assert made.post(f"/jobs/{job_id}/retry", json={"reset_attempts": False}).status == 200
        assert made.delete(f"/jobs/{other}").status == 200
        detail = made.get(f"/jobs/{job_id}", token=VIEWER).body
    models.JobDetail.model_validate(detail)
    assert [(e["action"], e["actor"], e["details"]) for e in detail["audit_trail"]] == [
        ("job_cancelled", "ops@example.com", {"from": "pending"}),
        ("job_replay", "ops@example.com", {"from": "cancelled", "reset_attempts": False}),
    ]
    assert all(datetime.fromisoformat(e["at"]).tzinfo for e in detail["audit_trail"])
    # The discard keeps the payload of the job that is gone.
    [discard] = jobs.audit_trail(other)
    assert (discard.action, discard.actor, discard.details) == (
        "job_discard",
        "ops@example.com",
        {"from": "pending", "payload": {"n": 2}},
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_created_job_names_the_caller_in_its_audit_trail(flavour: str, pg_dsn: str) -> None:
    with client_for(flavour, pg_dsn, settings=Settings(audit=True)) as made:
        created = made.post("/jobs", json={"kind": "report.build", "payload": {"n": 1}})
        assert created.status == 201, created.body
        detail = made.get(f"/jobs/{created.body['id']}", token=VIEWER).body
    assert [(e["action"], e["actor"]) for e in detail["audit_trail"]] == [
        ("job_enqueued", "ops@example.com")
    ]


# ---- one mapping, one schema --------------------------------------------------------------


def test_the_job_schema_is_the_json_of_a_job(jobs: Engine, pg_dsn: str) -> None:
    job = jobs.get_job(dead(jobs, pg_dsn, tenant="t"))
    assert set(models.Job.model_fields) == set(job_json(job))
    models.Job.model_validate(job_json(job))


def test_the_apps_public_document_lists_no_admin_operation_by_default() -> None:
    from fastapi import FastAPI

    app = FastAPI()
    mount(app, create_router(Engine(InMemoryJobStore()), authorize=lambda r, p: "x"), prefix=PREFIX)
    assert not [path for path in app.openapi().get("paths", {}) if path.startswith(PREFIX)]


def test_fastapi_document_has_every_operation_with_its_schemas() -> None:
    from fastapi import FastAPI

    app = FastAPI()
    router = create_router(
        Engine(InMemoryJobStore()), authorize=lambda r, p: "x", include_in_schema=True
    )
    mount(app, router, prefix=PREFIX)
    document = app.openapi()
    found = {
        operation["operationId"]: (method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert found == {op.id: (op.method, PREFIX + op.path) for op in OPERATIONS}
    get_job = document["paths"][PREFIX + "/jobs/{job_id}"]["get"]
    schema = get_job["responses"]["200"]["content"]["application/json"]["schema"]
    assert "audit_trail" in schema["properties"]
    assert "$ref" not in str(schema)
    assert set(get_job["responses"]) == {"200", "401", "403", "404", "422", "500", "503"}
    assert PREFIX + "/openapi.json" not in document["paths"]


#: A server nobody listens on: the database is down.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_with_the_database_down_every_read_answers_503_at_once(flavour: str) -> None:
    with client_for(flavour, UNREACHABLE) as down:
        for path in ["/jobs", "/jobs/1", "/dlq", "/counts", "/workers"]:
            began = time.monotonic()
            reply = down.get(path)
            assert time.monotonic() - began < 2.0  # issue 29: not the pool's 30 s
            body = problem(reply, 503, "unavailable")
            assert body["detail"].startswith("the database is unreachable: "), body
            assert reply.headers["retry-after"] == str(RETRY_AFTER)
        began = time.monotonic()
        health = down.get("/health")
        assert time.monotonic() - began < 2.0
        assert health.status == 200  # the report is the answer: unhealthy, unreachable
        assert (health.body["healthy"], health.body["database"]["reachable"]) == (False, False)


@pytest.mark.parametrize(
    ("door", "name", "path"),
    [
        ("rest", "listJobs", "/api/jobs"),  # an operation of its own
        ("rest", "getCounts", "/api/counts"),  # a shared read
        ("rest", "fallback", "/api/nothing"),
        ("dashboard", "overview", "/admin/"),
        ("dashboard", "dead", "/admin/dead"),
    ],
)
def test_a_hook_whose_database_is_down_answers_503_not_500(
    door: str, name: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A hook that reads the database (its users' table) may find it down: the door's
    # answer is the outage's 503, as a read's own, not a logged 500.
    from skiplock.core import DatabaseUnavailableError
    from skiplock.integrations.dashboard import Dashboard

    def hook(request: Request, permission: Permission) -> str:
        raise DatabaseUnavailableError("the database is unreachable: the users' table")

    engine = Engine(InMemoryJobStore(), Settings())
    served = (
        RestApi(engine, authorize=hook) if door == "rest" else Dashboard(engine, authorize=hook)
    )
    request = Request("GET", path, headers={"host": "h"})
    with caplog.at_level("ERROR"):
        fallback = name == "fallback"
        response = served.fallback(request) if fallback else served.handle(name, request)
    assert response.status == 503
    assert response.headers["Retry-After"] == str(RETRY_AFTER)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
