"""``cli.run_mounted``: the tree's commands on an application's own engine (what
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
    assert cli.run_mounted("health", ["--json"], engine, prog="app health") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["healthy"], report["kinds"]) == (True, [])
    engine.enqueue("report.build", {})
    assert cli.run_mounted("health", [], engine, prog="app health") == 1  # nobody claims it
    assert "no live worker" in capsys.readouterr().out
    assert cli.run_mounted("health", ["--max-dead", "x"], engine, prog="app health") == 2
    assert "usage: app health" in capsys.readouterr().err


def test_schema_needs_a_postgresql_store(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_mounted("schema", ["status"], engine, prog="app schema") == 2
    assert "(InMemoryJobStore) has no PostgreSQL schema" in capsys.readouterr().err


def test_health_and_schema_need_a_sync_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    assert cli.run_mounted("health", [], engine, prog="app health") == 2
    assert "app health needs a sync skiplock Engine" in capsys.readouterr().err


def test_worker_checks_its_options_against_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_mounted("worker", ["--kinds", "nobody.handles"], engine, prog="w") == 2
    assert "w has no processor for kind(s) nobody.handles" in capsys.readouterr().err
    assert cli.run_mounted("worker", ["--concurrency", "0"], engine, prog="w") == 2


def test_the_admin_commands_act_on_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    job = engine.enqueue("report.build", {}).id
    assert cli.run_mounted("counts", ["--json"], engine, prog="app counts") == 0
    assert json.loads(capsys.readouterr().out)["counts"][0]["count"] == 1
    assert cli.run_mounted("jobs", ["cancel", str(job)], engine, prog="app jobs") == 0
    assert capsys.readouterr().out == f"job {job}: cancelled\n"
    assert cli.run_mounted("jobs", ["cancel", str(job)], engine, prog="app jobs") == 1
    assert capsys.readouterr().err == (
        f"skiplock: job {job}: job {job} is cancelled: only pending or running jobs can be "
        "cancelled\n"
    )


def test_worker_until_idle_runs_what_is_due(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    done: list[object] = []
    engine.processor("report.build")(done.append)
    engine.enqueue("report.build", {"n": 1})
    assert cli.run_mounted("worker", ["--until-idle"], engine, prog="w") == 0
    assert capsys.readouterr().out == "handled 1 job(s)\n"
    assert done == [{"n": 1}]


def test_only_the_mountable_commands() -> None:
    assert cli.MOUNTABLE == (
        "worker",
        "schema",
        "health",
        "jobs",
        "dlq",
        "counts",
        "retention",
        "metrics",
        "pause",
        "resume",
        "paused",
        "limits",
        "concurrency",
        "workers",
        "drain-worker",
        "stop-worker",
    )
    with pytest.raises(ValueError, match="worker, schema, health"):
        cli.run_mounted("demo", [], Engine(InMemoryJobStore()), prog="app demo")
