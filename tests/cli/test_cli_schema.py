"""``skiplock schema apply|sql|status``, and the message when the psycopg extra is missing."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from skiplock import cli
from skiplock.adapters._pg import migrations

HAS_PSYCOPG = find_spec("psycopg") is not None


HINT = "pip install 'skiplock[psycopg]'"


@pytest.mark.usefixtures("no_psycopg")
def test_cli_schema_sql_prints_ddl_without_database_or_driver(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKIPLOCK_DSN", raising=False)
    assert cli.main(["schema", "sql", "--schema", "jobs_here"]) == 0
    out = capsys.readouterr().out
    assert "CREATE TABLE" in out
    assert '"jobs_here".jobs' in out
    assert '"skiplock"' not in out  # every object in the chosen schema


@pytest.mark.usefixtures("no_psycopg")
@pytest.mark.parametrize("action", ["apply", "status"])
def test_cli_schema_without_extra_names_it(capsys: pytest.CaptureFixture[str], action: str) -> None:
    assert cli.main(["schema", action, "--dsn", "postgresql://nowhere/db"]) == 2
    assert HINT in capsys.readouterr().err


@pytest.mark.parametrize("action", ["apply", "status"])
def test_cli_schema_needs_a_dsn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    monkeypatch.delenv("SKIPLOCK_DSN", raising=False)
    assert cli.main(["schema", action]) == 2
    err = capsys.readouterr().err
    assert ("--dsn" in err and "SKIPLOCK_DSN" in err) if HAS_PSYCOPG else HINT in err


@pytest.mark.parametrize("name", ["Bad", "1x", "a-b", "x" * 64])
def test_cli_schema_rejects_invalid_schema_name(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert cli.main(["schema", "sql", "--schema", name]) == 2
    assert "invalid identifier" in capsys.readouterr().err


def test_cli_schema_rejects_unknown_action(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema", "drop"]) == 2
    assert "invalid choice: 'drop'" in capsys.readouterr().err


@pytest.mark.postgres
def test_cli_schema_apply_then_status(
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not HAS_PSYCOPG:
        assert cli.main(["schema", "apply", "--dsn", "postgresql://nowhere/db"]) == 2
        assert HINT in capsys.readouterr().err
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    assert cli.main(["schema", "status", "--dsn", dsn, "--schema", "cli_s"]) == 1
    assert "not installed: run `skiplock schema apply --dsn ... --schema cli_s`" in (
        capsys.readouterr().out
    )
    assert cli.main(["schema", "apply", "--dsn", dsn, "--schema", "cli_s"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("applied ")] == [
        f"applied {m.name}" for m in migrations()
    ]
    monkeypatch.setenv("SKIPLOCK_DSN", dsn)  # the DSN from the environment
    assert cli.main(["schema", "apply", "--schema", "cli_s"]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert cli.main(["schema", "status", "--schema", "cli_s"]) == 0
    out = capsys.readouterr().out
    assert f"applied: {', '.join(m.name for m in migrations())}" in out
    assert "status:  up to date" in out


@pytest.mark.postgres
def test_cli_schema_unreachable_database_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=2"
    status = cli.main(["schema", "status", "--dsn", dsn])
    err = capsys.readouterr().err
    if not HAS_PSYCOPG:
        assert status == 2
        assert HINT in err
        return
    assert status == 1
    # What the driver said, on one line (psycopg's message has a second one, its hint).
    [line] = err.splitlines()
    assert line.startswith("skiplock: error:")
    assert "Connection refused" in line
