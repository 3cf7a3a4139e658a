"""``cli.run_embedded``: the ``skiplock`` commands on an application's own engine (what
``flask skiplock ...`` runs; tests/integrations/test_flask.py runs them on PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from skiplock import AsyncEngine, Engine, cli
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore


def test_health_prints_the_report_of_the_engine_s_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_embedded(engine, "health", ["--json"], prog="app health") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["healthy"], report["kinds"]) == (True, [])
    engine.enqueue("report.build", {})
    assert cli.run_embedded(engine, "health", [], prog="app health") == 1  # nobody claims it
    assert "no live worker" in capsys.readouterr().out
    assert cli.run_embedded(engine, "health", ["--max-dead", "x"], prog="app health") == 2
    assert "usage: app health" in capsys.readouterr().err


def test_schema_needs_a_postgresql_store(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_embedded(engine, "schema", ["status"], prog="app schema") == 2
    assert "(InMemoryJobStore) has no PostgreSQL schema" in capsys.readouterr().err


def test_health_and_schema_need_a_sync_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    assert cli.run_embedded(engine, "health", [], prog="app health") == 2
    assert "needs a sync skiplock Engine" in capsys.readouterr().err


def test_worker_checks_its_options_against_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_embedded(engine, "worker", ["--kinds", "nobody.handles"], prog="w") == 2
    assert "w has no processor for kind(s) nobody.handles" in capsys.readouterr().err
    assert cli.run_embedded(engine, "worker", ["--concurrency", "0"], prog="w") == 2


def test_only_the_embedded_commands() -> None:
    with pytest.raises(ValueError, match="worker, schema, health"):
        cli.run_embedded(Engine(InMemoryJobStore()), "demo", [], prog="app demo")
