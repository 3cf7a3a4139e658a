"""``skiplock pause``, ``resume``, ``paused`` and ``limits list|set|clear`` against
PostgreSQL: what they print for people and with ``--json``, their usage errors, and the
actor they record."""

from __future__ import annotations

import json

import pytest

from tests.cli.admin_helpers import add_worker, enqueue
from tests.cli.test_cli_admin import Run, needs_psycopg

pytestmark = needs_psycopg


@pytest.fixture
def run(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(admin_dsn, capsys)


def test_pause_paused_resume(run: Run) -> None:
    assert run("paused") == 0
    assert run.lines == ["nothing paused"]
    assert run("pause", "--tenant", "acme", "--reason", "unpaid", "--actor", "ops") == 0
    assert run.lines == ["paused kind=* tenant=acme"]
    [pause] = run.json("paused")["paused"]
    assert (pause["kind"], pause["tenant"], pause["reason"], pause["actor"]) == (
        None,
        "acme",
        "unpaid",
        "ops",
    )
    assert run("paused") == 0
    assert run.lines[0].split() == ["KIND", "TENANT", "SINCE", "BY", "REASON"]
    assert run.lines[1].split()[:2] == ["*", "acme"]
    assert run.json("resume", "--tenant", "acme")["resumed"]["tenant"] == "acme"
    assert run("resume", "--tenant", "acme") == 1
    assert "no pause of kind=* tenant=acme" in run.err


def test_pause_needs_a_kind_or_a_tenant(run: Run) -> None:
    assert run("pause") == 2
    assert "give --kind, --tenant or both" in run.err
    assert run("pause", "--kind", "  ") == 2  # the engine's check


def test_limits_set_list_clear(run: Run) -> None:
    assert run("limits", "list") == 0
    assert run.lines == ["no limits set at run time"]
    assert run("limits", "set", "--kind", "mail", "--rps", "5", "--burst", "10") == 0
    assert run.lines == ["limit of kind=mail tenant=*: 5/s, burst 10"]
    set_big = run.json(
        "limits", "set", "--kind", "mail", "--tenant", "big", "--rps", "50", "--burst", "100"
    )
    assert set_big["limit"]["tenant"] == "big"
    assert run("limits", "set", "--provider", "smtp", "--rps", "20", "--burst", "40") == 0
    listed = run.json("limits", "list")["limits"]
    assert {(x["kind"], x["tenant"], x["provider"], x["rps"], x["burst"]) for x in listed} == {
        ("mail", None, None, 5.0, 10),
        ("mail", "big", None, 50.0, 100),
        (None, None, "smtp", 20.0, 40),
    }
    assert run("limits", "list") == 0
    assert run.lines[0].split() == ["KIND", "TENANT", "PROVIDER", "RPS", "BURST", "SET", "BY"]
    assert run("limits", "clear", "--kind", "mail", "--tenant", "big") == 0
    assert run.lines == ["cleared the limit of kind=mail tenant=big"]
    assert run("limits", "clear", "--kind", "mail", "--tenant", "big") == 1
    assert run.json("limits", "clear", "--provider", "smtp")["cleared"]["provider"] == "smtp"
    assert len(run.json("limits", "list")["limits"]) == 1


def test_limits_usage_errors(run: Run) -> None:
    assert run("limits", "set", "--rps", "1", "--burst", "1") == 2
    assert "give --kind" in run.err
    assert run("limits", "set", "--provider", "p", "--kind", "k", "--rps", "1", "--burst", "1") == 2
    assert "--provider stands alone" in run.err
    assert run("limits", "set", "--kind", "k", "--rps", "0", "--burst", "1") == 2
    assert "rps must be > 0" in run.err


def test_pause_and_limits_refuse_a_kind_the_database_does_not_know(
    run: Run, admin_dsn: str
) -> None:
    # Issue 41 item 4: `--dsn` alone knows the kinds of the jobs and the workers' kinds.
    enqueue(admin_dsn, "email_send")
    add_worker(admin_dsn, "w1", "report.build")
    for argv in (
        ("pause", "--kind", "emial_send"),
        ("pause", "--kind", "emial_send", "--tenant", "acme"),
        ("limits", "set", "--kind", "emial_send", "--rps", "1", "--burst", "1"),
    ):
        assert run(*argv) == 2
        assert run.out == ""
        [line] = run.err.splitlines()
        assert line.startswith("skiplock: error: unknown kind 'emial_send'")
        assert "(known kinds: 'email_send', 'report.build')" in line
        assert "--allow-unknown-kind" in line
        assert line.endswith("Did you mean 'email_send'?")
    assert run.json("paused")["paused"] == []
    assert run.json("limits", "list")["limits"] == []
    assert run("pause", "--kind", "report.build") == 0
    assert run("pause", "--kind", "billing", "--allow-unknown-kind") == 0
    assert run("limits", "set", "--kind", "billing", "--rps", "1", "--burst", "1") == 2
    assert (
        run(
            "limits",
            "set",
            "--kind",
            "billing",
            "--rps",
            "1",
            "--burst",
            "1",
            "--allow-unknown-kind",
        )
        == 0
    )
    assert sorted(p["kind"] for p in run.json("paused")["paused"]) == ["billing", "report.build"]
    assert [x["kind"] for x in run.json("limits", "list")["limits"]] == ["billing"]


def test_concurrency_set_list_clear(run: Run, admin_dsn: str) -> None:
    # Issue 45 item 4: a kind's limit per node or cluster-wide, a key's; with the actor.
    enqueue(admin_dsn, "sync")
    assert run("concurrency", "list") == 0
    assert run.lines == ["no concurrency limits set at run time"]
    assert run("concurrency", "set", "--kind", "sync", "--limit", "3", "--actor", "ops") == 0
    assert run.lines == ["concurrency limit of kind=sync (cluster): 3"]
    node = run.json("concurrency", "set", "--kind", "sync", "--scope", "node", "--limit", "2")
    assert (node["concurrency"]["scope"], node["concurrency"]["limit"]) == ("node", 2)
    assert run("concurrency", "set", "--key", "db:main", "--limit", "1") == 0
    listed = run.json("concurrency", "list")["concurrency"]
    assert {(x["kind"], x["key"], x["scope"], x["limit"], x["actor"]) for x in listed} == {
        ("sync", None, "cluster", 3, "ops"),
        ("sync", None, "node", 2, None),
        (None, "db:main", "cluster", 1, None),
    }
    assert run("concurrency", "list") == 0
    assert run.lines[0].split() == ["KIND", "KEY", "SCOPE", "LIMIT", "SET", "BY"]
    assert run("concurrency", "clear", "--kind", "sync", "--scope", "node") == 0
    assert run.lines == ["cleared the concurrency limit of kind=sync (node)"]
    assert run("concurrency", "clear", "--kind", "sync", "--scope", "node") == 1
    assert "no concurrency limit of kind=sync (node) was set" in run.err
    assert run.json("concurrency", "clear", "--key", "db:main")["cleared"]["key"] == "db:main"
    assert len(run.json("concurrency", "list")["concurrency"]) == 1


def test_concurrency_usage_errors(run: Run, admin_dsn: str) -> None:
    enqueue(admin_dsn, "sync")  # a database that knows a kind refuses the others
    assert run("concurrency", "set", "--limit", "1") == 2
    assert "give --kind or --key" in run.err
    assert run("concurrency", "set", "--kind", "k", "--key", "x", "--limit", "1") == 2
    assert run("concurrency", "set", "--key", "x", "--scope", "node", "--limit", "1") == 2
    assert "cluster-wide" in run.err
    assert run("concurrency", "set", "--kind", "k", "--limit", "0") == 2
    assert run("concurrency", "set", "--kind", "nope", "--limit", "1") == 2
    assert "unknown kind 'nope'" in run.err


def test_drain_and_stop_a_worker(run: Run, admin_dsn: str) -> None:
    # Issue 45 item 5: the request is stored on the worker's row, with the actor.
    add_worker(admin_dsn, "host-1/7/w", "email")
    assert run("drain-worker", "host-1/7/w", "--actor", "ops") == 0
    assert run.lines == ["asked worker host-1/7/w to drain"]
    [listed] = run.json("workers")["workers"]
    assert (listed["request"]["action"], listed["request"]["actor"]) == ("drain", "ops")
    assert run("workers") == 0
    assert run.lines[1].split()[-1] == "drain"
    stopped = run.json("stop-worker", "host-1/7/w")["requested"]
    assert (stopped["worker_id"], stopped["action"]) == ("host-1/7/w", "stop")
    assert run("stop-worker", "nobody") == 1
    assert "no worker 'nobody' is registered" in run.err
    assert run("drain-worker", "nobody", "--json") == 1
    assert json.loads(run.out) == {"requested": None}
