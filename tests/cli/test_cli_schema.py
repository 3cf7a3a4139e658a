"""``skiplock schema apply|sql|status``, and the message when the psycopg extra is missing."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from importlib.util import find_spec

import pytest

from skiplock import cli
from skiplock.adapters._pg import migrations
from skiplock.adapters._pg._migrate import migration_lock_key

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
    lines = capsys.readouterr().out.splitlines()
    names = [m.name for m in migrations()]
    assert lines[:3] == [
        "waiting for the migration lock of schema 'cli_s'",
        "creating schema 'cli_s' and its version table",
        f"{len(names)} migration(s) to apply, in one transaction",
    ]
    # Each migration as it starts and as it ends, then the commit.
    assert [line.partition(" in ")[0] for line in lines[3:-1]] == [
        line for name in names for line in (f"applying {name} ...", f"applied {name}")
    ]
    assert all(line.endswith(" s") for line in lines[4:-1:2])
    assert lines[-1] == f"schema 'cli_s' is up to date ({len(names)} migration(s) committed)"
    monkeypatch.setenv("SKIPLOCK_DSN", dsn)  # the DSN from the environment
    assert cli.main(["schema", "apply", "--schema", "cli_s"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "waiting for the migration lock of schema 'cli_s'",
        "schema 'cli_s' is up to date",
    ]
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


def _sql(capsys: pytest.CaptureFixture[str], *options: str) -> str:
    assert cli.main(["schema", "sql", *options]) == 0
    return capsys.readouterr().out


@pytest.mark.usefixtures("no_psycopg")
def test_cli_schema_sql_from_0_is_the_fresh_install_ddl(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fresh = _sql(capsys)
    assert _sql(capsys, "--from", "0") == fresh
    assert "CREATE SCHEMA IF NOT EXISTS" in fresh


@pytest.mark.usefixtures("no_psycopg")
def test_cli_schema_sql_from_n_prints_the_later_migrations_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = _sql(capsys, "--from", "3", "--schema", "jobs_here")
    later = migrations()[3:]
    assert later, "needs migrations after version 3"
    positions = [script.index(m.sql("jobs_here").strip()) for m in later]
    assert positions == sorted(positions)
    for m in migrations()[:3]:
        assert m.name not in script
    # Each migration is recorded as the migrator records it, right after its DDL.
    for m in later:
        assert (
            f'INSERT INTO "jobs_here".schema_migrations (version, name) '
            f"VALUES ({m.version}, '{m.name}');"
        ) in script
    assert "CREATE SCHEMA" not in script  # an upgrade: the schema exists
    assert script.index("BEGIN;") < script.index("IF current <> 3 THEN") < positions[0]
    assert script.rstrip().endswith("COMMIT;")
    assert '"skiplock"' not in script


@pytest.mark.usefixtures("no_psycopg")
def test_cli_schema_sql_from_the_current_version_only_checks_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    latest = len(migrations())
    script = _sql(capsys, "--from", str(latest))
    assert f"IF current <> {latest} THEN" in script
    assert "schema_migrations (version, name)" not in script
    assert all(m.name not in script for m in migrations())


@pytest.mark.parametrize("value", ["-1", str(len(migrations()) + 1), "1000"])
def test_cli_schema_sql_from_out_of_range_exit_2(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert cli.main(["schema", "sql", "--from", value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"no schema version {value}" in captured.err
    assert f"0 (none) to {len(migrations())}" in captured.err


def test_cli_schema_sql_from_needs_an_int(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema", "sql", "--from", "three"]) == 2
    assert "invalid int value: 'three'" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["apply", "status"])
def test_cli_schema_from_is_only_for_sql(capsys: pytest.CaptureFixture[str], action: str) -> None:
    status = cli.main(["schema", action, "--from", "1", "--dsn", "postgresql://nowhere/db"])
    assert status == 2
    err = capsys.readouterr().err
    assert "--from is an option of 'schema sql'" in err


@pytest.mark.postgres
@pytest.mark.skipif(not HAS_PSYCOPG, reason="holds the lock through psycopg (psycopg env)")
def test_cli_schema_apply_prints_each_step_as_it_goes(request: pytest.FixtureRequest) -> None:
    """Through a pipe (a CI log): the step under way is on the pipe while it runs, here
    the wait for the migration lock, which this test holds."""
    import psycopg

    dsn: str = request.getfixturevalue("pg_dsn")
    key = migration_lock_key("cli_p")
    command = [sys.executable, "-m", "skiplock", "schema", "apply", "--dsn", dsn]
    lines: queue.Queue[str] = queue.Queue()
    with (
        psycopg.connect(dsn, autocommit=True) as holder,
        subprocess.Popen(
            [*command, "--schema", "cli_p"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as apply,
    ):
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            assert apply.stdout is not None
            out = apply.stdout

            def read() -> None:
                for line in out:
                    lines.put(line)

            reader = threading.Thread(target=read)
            reader.start()
            # While the lock is held nothing can end: the line is there before the end.
            assert lines.get(timeout=30) == "waiting for the migration lock of schema 'cli_p'\n"
            assert apply.poll() is None
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        assert apply.wait(60) == 0
        reader.join(10)
    rest = list(lines.queue)
    assert rest[0] == "creating schema 'cli_p' and its version table\n"
    assert rest[-1].startswith("schema 'cli_p' is up to date (")
