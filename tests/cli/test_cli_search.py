"""``skiplock jobs list`` searching (docs/search.md, "The search filters"): --payload,
--error, --idempotency-key on PostgreSQL, their usage errors, and a non-selective search
that stops at its budget and says where."""

from __future__ import annotations

from typing import Any

import pytest

from skiplock import cli
from skiplock.core import JobPage
from tests.cli.admin_helpers import bury, engine_on, enqueue, parse
from tests.cli.test_cli_admin import needs_psycopg

# The noextras env has no driver; the psycopg env runs these (and fails without a server).
pytestmark = [pytest.mark.postgres, needs_psycopg]


@pytest.fixture
def search(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> Any:
    """``jobs list --json`` with the given options: its page."""

    def run(*argv: str) -> Any:
        status = cli.main(["jobs", "list", *argv, "--json", "--dsn", admin_dsn])
        out, err = capsys.readouterr()
        assert status == 0, err
        return parse(out)

    return run


def ids(page: Any) -> list[int]:
    return [job["id"] for job in page["jobs"]]


def test_jobs_list_searches_payload_error_and_key(admin_dsn: str, search: Any) -> None:
    with engine_on(admin_dsn) as engine:
        a = engine.enqueue("user.sync", {"user_id": 42, "org": {"id": 7}}).id
        b = engine.enqueue("user.sync", {"user_id": "42"}, idempotency_key="sync-42").id
        c = engine.enqueue("user.sync", {"user_id": 43}).id
    bury(admin_dsn, c, error="Timeout talking to S3")

    assert ids(search("--payload", "user_id=42")) == [a]
    assert ids(search("--payload", 'user_id="42"')) == [b]
    assert ids(search("--payload", "org.id=7", "--payload", "user_id=42")) == [a]
    assert ids(search("--payload", '{"org": {"id": 7}}')) == [a]
    assert ids(search("--error", "TIMEOUT talking")) == [c]
    assert ids(search("--error", "timeout", "--state", "pending")) == []
    assert ids(search("--idempotency-key", "sync-42")) == [b]


@pytest.mark.parametrize(
    "argv",
    [
        ["--payload", "no-equals-sign"],
        ["--payload", "{bad json"],
        ["--payload", "=1"],
        ["--error", ""],
        ["--idempotency-key", "x" * 201],
    ],
)
def test_jobs_list_refuses_a_bad_search(
    argv: list[str], admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["jobs", "list", *argv, "--dsn", admin_dsn]) == 2
    assert argv[0] in capsys.readouterr().err


def test_a_non_selective_search_stops_at_its_budget_and_continues(
    admin_dsn: str, search: Any
) -> None:
    enqueue(admin_dsn, "common", 2 * JobPage.READ_FACTOR + 5)
    with engine_on(admin_dsn) as engine:
        rare = engine.enqueue("rare", {"rare": True}).id
    first = search("--payload", "rare=true", "--limit", "1")
    assert (ids(first), first["partial"]) == ([], True)
    rest = search("--payload", "rare=true", "--limit", "1", "--after", str(first["next_after"]))
    assert (ids(rest), rest["partial"], rest["next_after"]) == ([rare], False, None)
