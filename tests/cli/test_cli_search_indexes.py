"""``skiplock schema index list|add|drop``: the opt-in search indexes (docs/search.md,
"The opt-in search indexes"), built concurrently, idempotent, in the schema ``--schema``
names."""

from __future__ import annotations

from typing import Any

import pytest

from skiplock import cli


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["index", "add"], "'schema index add' needs an index: payload or error"),
        (["index", "drop"], "'schema index drop' needs an index: payload or error"),
        (["index", "list", "payload"], "'schema index list' takes no index name"),
        (["index", "add", "names"], "invalid choice: 'names'"),
        (["index", "remove", "payload"], "invalid choice: 'remove'"),
        (["apply", "add"], "unexpected argument 'add' after 'schema apply'"),
        (["status", "--create-extension"], "--create-extension is an option of"),
        (["index", "drop", "error", "--create-extension"], "'schema index add'"),
    ],
)
def test_cli_schema_index_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # Refused before any connection or driver.
    assert cli.main(["schema", *argv, "--dsn", "postgresql://nowhere/db"]) == 2
    assert message in capsys.readouterr().err


def _run(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> list[str]:
    assert cli.main(["schema", *argv]) == status, capsys.readouterr()
    captured = capsys.readouterr()
    return (captured.out + captured.err).splitlines()


def _states(capsys: pytest.CaptureFixture[str], dsn: str) -> dict[str, str]:
    lines = _run(capsys, "index", "--dsn", dsn, "--schema", "cli_idx")
    assert lines[0] == "schema:  cli_idx"
    assert lines[1].split() == ["NAME", "INDEX", "STATE", "SIZE", "SERVES"]
    return {line.split()[0]: line.split()[2] for line in lines[2:]}


@pytest.mark.postgres
def test_cli_schema_index_add_list_drop(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn: str = request.getfixturevalue("pg_dsn")  # a fresh database: no pg_trgm
    at = ("--dsn", dsn, "--schema", "cli_idx")
    _run(capsys, "apply", *at)
    assert _states(capsys, dsn) == {"payload": "absent", "error": "absent"}

    # The error index needs pg_trgm: named, with how to add it; nothing changed.
    [line] = _run(capsys, "index", "add", "error", *at, status=1)
    assert "needs the PostgreSQL extension pg_trgm, not installed in database" in line
    assert "--create-extension" in line
    assert _states(capsys, dsn) == {"payload": "absent", "error": "absent"}

    lines = _run(capsys, "index", "add", "payload", *at)
    assert lines[0] == "building jobs_payload_search_idx concurrently (writes go on) ..."
    assert lines[1].startswith("built jobs_payload_search_idx in ")
    assert lines[-1] == "search index 'payload' (jobs_payload_search_idx) built"
    assert _run(capsys, "index", "add", "payload", *at) == [
        "jobs_payload_search_idx exists in schema 'cli_idx'",
        "search index 'payload' (jobs_payload_search_idx) already exists",
    ]
    lines = _run(capsys, "index", "add", "error", "--create-extension", *at)
    assert lines[0] == "creating the extension pg_trgm"
    assert lines[-1] == "search index 'error' (jobs_error_search_idx) built"
    assert _states(capsys, dsn) == {"payload": "present", "error": "present"}
    status = _run(capsys, "status", *at)
    assert status[-1].startswith("indexes: payload (")
    assert "error (" in status[-1]

    # A build that was interrupted leaves an invalid index: listed so, and rebuilt.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = 'cli_idx.jobs_payload_search_idx'::regclass"
        )
    assert _states(capsys, dsn)["payload"] == "invalid"
    lines = _run(capsys, "index", "add", "payload", *at)
    assert lines[0] == "dropping the invalid jobs_payload_search_idx an interrupted build left"
    assert _states(capsys, dsn)["payload"] == "present"

    for name, index in (("payload", "jobs_payload_search_idx"), ("error", "jobs_error_search_idx")):
        assert _run(capsys, "index", "drop", name, *at)[-1] == (
            f"search index {name!r} ({index}) dropped"
        )
        assert _run(capsys, "index", "drop", name, *at)[-1] == (
            f"search index {name!r} ({index}) was not there"
        )
    assert _states(capsys, dsn) == {"payload": "absent", "error": "absent"}
    assert _run(capsys, "status", *at)[-1] == (
        "indexes: payload absent, error absent (opt-in search indexes: `schema index`)"
    )


@pytest.mark.postgres
def test_cli_schema_status_reads_migrations_and_indexes_on_one_connection(
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn: str = request.getfixturevalue("pg_dsn")
    at = ("--dsn", dsn, "--schema", "cli_idx")
    _run(capsys, "apply", *at)
    opened: list[str] = []
    connect = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append("connect")
        return connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    lines = _run(capsys, "status", *at)
    assert lines[-2] == "status:  up to date"
    assert lines[-1].startswith("indexes: payload absent, error absent")
    assert opened == ["connect"]
