"""The ``skiplock`` admin commands in an image with asyncpg and no psycopg: they reach
PostgreSQL through asyncpg (tox's asyncpg env has no psycopg; elsewhere the fixture hides
it)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, cli
from skiplock.adapters.asyncpg import AsyncpgJobStore

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def no_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import psycopg`` fails, as where the extra is not installed."""
    for name in list(sys.modules):
        if name.partition(".")[0] in {"psycopg", "psycopg_pool"} or name.startswith(
            "skiplock.adapters.psycopg"
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)


def run(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def enqueue(dsn: str, kind: str, **options: Any) -> None:
    async def run() -> None:
        store = AsyncpgJobStore(dsn, max_size=1)
        try:
            await AsyncEngine(store).enqueue(kind, {}, **options)
        finally:
            await store.close()

    asyncio.run(run())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_reads_the_queue_through_asyncpg(
    apg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    enqueue(apg_dsn, "mail.send")
    status, out, err = run(capsys, ["health", "--dsn", apg_dsn, "--json"])
    report = json.loads(out)
    assert (status, err) == (1, "")  # a due job and no live worker
    assert report["database"] == {"reachable": True, "error": None}
    assert report["schema"]["up_to_date"] is True
    [kind] = report["kinds"]
    assert (kind["kind"], kind["pending_due"], kind["covered"]) == ("mail.send", 1, False)


def test_health_of_a_database_that_is_down_through_asyncpg(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    status, out, err = run(capsys, ["health", "--dsn", dsn, "--timeout", "2s"])
    assert (status, err) == (1, "")
    assert out.splitlines()[0] == "status:   unhealthy"
    assert "problem:  database unreachable:" in out


def test_counts_and_jobs_through_asyncpg(apg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    enqueue(apg_dsn, "a.b", tenant="t1")
    status, out, err = run(capsys, ["counts", "--dsn", apg_dsn, "--json"])
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "counts": [{"kind": "a.b", "tenant": "t1", "state": "pending", "count": 1}]
    }
    status, out, err = run(capsys, ["jobs", "list", "--dsn", apg_dsn, "--json"])
    assert (status, err) == (0, "")
    assert [job["kind"] for job in json.loads(out)["jobs"]] == ["a.b"]


def test_schema_status_and_apply_through_asyncpg(
    make_database: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_database()
    status, out, _ = run(capsys, ["schema", "status", "--dsn", dsn])
    assert status == 1
    assert "status:  not installed" in out
    status, out, err = run(capsys, ["schema", "apply", "--dsn", dsn])
    assert (status, err) == (0, "")
    assert "\napplied 0001_initial in " in out  # each step, as through psycopg
    assert out.splitlines()[-1].startswith("schema 'skiplock' is up to date (")
    status, out, _ = run(capsys, ["schema", "status", "--dsn", dsn])
    assert status == 0
    assert "status:  up to date" in out.splitlines()
    # The opt-in search indexes last, as through psycopg.
    assert out.splitlines()[-1] == (
        "indexes: payload absent, error absent (opt-in search indexes: `schema index`)"
    )


def test_schema_index_add_list_drop_through_asyncpg(
    make_database: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_database()  # fresh: no pg_trgm
    assert run(capsys, ["schema", "apply", "--dsn", dsn])[0] == 0
    for name in ("payload", "error"):
        status, out, err = run(
            capsys, ["schema", "index", "add", name, "--create-extension", "--dsn", dsn]
        )
        assert (status, err) == (0, ""), out
        assert out.splitlines()[-1].endswith(f"(jobs_{name}_search_idx) built")
    status, out, _ = run(capsys, ["schema", "index", "--dsn", dsn])
    assert status == 0
    assert {line.split()[0]: line.split()[2] for line in out.splitlines()[2:]} == {
        "payload": "present",
        "error": "present",
    }
    for name in ("payload", "error"):
        status, out, _ = run(capsys, ["schema", "index", "drop", name, "--dsn", dsn])
        assert (status, out.splitlines()[-1]) == (
            0,
            f"search index {name!r} (jobs_{name}_search_idx) dropped",
        )
